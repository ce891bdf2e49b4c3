#!/usr/bin/env bash
# momoe-data as a user runs it: prepare the bundled corpus (and a WikiText-layout folder) into
# shards, verify and describe them, train from them with exactly the losses, evaluations and
# corpus fingerprints of training on the text; bad input exits 2 naming the problem; every
# subcommand answers --help. Mode mpi: 2 data-parallel ranks read the same global batches from
# the shards as from the text.
# With SentencePiece in the build (SP=1): a SentencePiece dataset trains and evaluates (momoe-eval
# tokenizing through momoe-data), training on the text with data.tokenizer gives the same losses,
# a replaced model is refused; without it, asking for it exits 2 naming the package.
# Usage: data_cli_test.sh BIN_DIR CONFIG cpu|mpi [SP=0|1]
set -u
bin=$1
config=$2
mode=${3:-cpu}
sp=${4:-0}
src=$(cd "$(dirname "$config")/../.." && pwd)
brown=$src/data/brown
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
export OPENBLAS_NUM_THREADS=1
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
export EXPECT_DIR=$run  # expect_code's out and err
losses() { grep -oE "^step [0-9]+/[0-9]+ \| loss [0-9.]+" "$1"; }
evals() { grep -oE "^eval at step .*" "$1" | grep -vE "[0-9]+/[0-9]+ sequences"; }  # results, not progress

# The tiny config's vocabulary (data.vocab_max_size 2000), the bundled splits.
"$bin/momoe-data" prepare --out "$run/ds" --train "$brown/train.txt.gz" --valid "$brown/valid.txt.gz" \
  --test "$brown/test.txt.gz" --vocab-max-size 2000 --shard-tokens 100000 --chunk-mb 1 --threads 2 \
  > "$run/prep.log" 2>&1 || { cat "$run/prep.log"; fail "momoe-data prepare"; }
grep -q "ready in" "$run/prep.log" || { cat "$run/prep.log"; fail "no summary line"; }
grep -qE "tokenizing test: .* \(100\.0%\), .*/s, [0-9]+ tokens, ETA" "$run/prep.log" || { cat "$run/prep.log"; fail "no progress line"; }
ls "$run/ds"/train-0000*.tok > /dev/null || fail "no train shards"
[ "$(ls "$run/ds"/train-*.tok | wc -l)" -ge 5 ] || fail "expected several train shards"
"$bin/momoe-data" verify "$run/ds" > "$run/verify" || { cat "$run/verify"; fail "verify"; }
grep -q ": ok;" "$run/verify" || fail "verify output"
"$bin/momoe-data" info "$run/ds" | grep -qE "train +[0-9]+ tokens" || fail "info output"
# The same command again: nothing to do.
"$bin/momoe-data" prepare --out "$run/ds" --train "$brown/train.txt.gz" --valid "$brown/valid.txt.gz" \
  --test "$brown/test.txt.gz" --vocab-max-size 2000 --shard-tokens 100000 --chunk-mb 1 > /dev/null 2>&1 ||
  fail "preparing a complete dataset again"

if [ "$mode" = mpi ]; then
  mpi=(mpirun -np 2 --oversubscribe)
  [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
  "${mpi[@]}" "$bin/momoe-train" --config "$config" --run-dir "$run/text" --set train.steps=4 \
    --set train.eval_sequences=8 > "$run/text.log" 2>&1 || { cat "$run/text.log"; fail "2-rank run on text"; }
  "${mpi[@]}" "$bin/momoe-train" --config "$config" --run-dir "$run/shards" --set train.steps=4 \
    --set train.eval_sequences=8 --set data.dataset="$run/ds" > "$run/shards.log" 2>&1 ||
    { cat "$run/shards.log"; fail "2-rank run on shards"; }
  grep -q "2 rank(s), ep 1 x dp 2" "$run/shards.log" || { cat "$run/shards.log"; fail "not 2 data ranks"; }
  [ "$(losses "$run/text.log" | wc -l)" -eq 4 ] || fail "no step lines"
  diff <(losses "$run/text.log") <(losses "$run/shards.log") || fail "2 ranks: losses differ between text and shards"
  diff <(evals "$run/text.log") <(evals "$run/shards.log") || fail "2 ranks: evaluations differ"
  echo "PASS (mpi)"
  exit 0
fi

"$bin/momoe-train" --config "$config" --run-dir "$run/text" --set train.steps=4 --set train.eval_sequences=8 \
  > "$run/text.log" 2>&1 || { cat "$run/text.log"; fail "run on text"; }
"$bin/momoe-train" --config "$config" --run-dir "$run/shards" --set train.steps=4 --set train.eval_sequences=8 \
  --set data.dataset="$run/ds" > "$run/shards.log" 2>&1 || { cat "$run/shards.log"; fail "run on shards"; }
grep -qF "momoe: data: train $run/ds (train) (" "$run/shards.log" || { cat "$run/shards.log"; fail "start-up line"; }
[ "$(losses "$run/text.log" | wc -l)" -eq 4 ] || fail "no step lines"
diff <(losses "$run/text.log") <(losses "$run/shards.log") || fail "losses differ between text and shards"
diff <(evals "$run/text.log") <(evals "$run/shards.log") || fail "evaluations differ between text and shards"
# Per word (= per token for the word tokenizer) and bits per byte, in the log and the statistics.
grep -qE "valid [0-9.]+ per word, [0-9.]+ bits/byte" "$run/shards.log" || fail "no per-word/bits-per-byte figures"
"$bin/momoe-stats" "$run/shards" --json "$run/s.jsonl" > /dev/null || fail "momoe-stats"
grep -q '"valid_bits_per_byte"' "$run/s.jsonl" && grep -q '"valid_word_ppl"' "$run/s.jsonl" ||
  fail "stats JSON lacks per-word perplexity or bits per byte"
# The corpus contents fingerprints agree: resuming the text run from the shards is no data change.
grep -ao "data.train contents[^\"]*tokens, fingerprint [0-9a-f]*" "$run/text/ckpt-00000004/manifest.pb" > "$run/fp.text" || true
grep -ao "data.train contents[^\"]*tokens, fingerprint [0-9a-f]*" "$run/shards/ckpt-00000004/manifest.pb" > "$run/fp.shards" || true
[ -s "$run/fp.text" ] && cmp -s "$run/fp.text" "$run/fp.shards" || fail "contents fingerprints differ: $(cat "$run/fp.text") vs $(cat "$run/fp.shards")"
# momoe-eval reports the comparable figures too (of 8 sequences: estimates at the whole text's ratios).
"$bin/momoe-eval" --checkpoint "$run/shards/ckpt-00000004" --text "$brown/test.txt.gz" --max-sequences 8 \
  --attack-rate 0 > "$run/eval" || fail "momoe-eval"
grep -q '"word_ppl_estimate"' "$run/eval" && grep -q '"bits_per_byte_estimate"' "$run/eval" || { cat "$run/eval"; fail "momoe-eval output"; }

# The WikiText layout, as published (wiki.*.tokens; <unk> is a word of the text).
mkdir -p "$run/wt"
for s in train valid test; do
  printf ' = Heading = \n\n the <unk> sat on the mat . \n the cat sat . \n' > "$run/wt/wiki.$s.tokens"
done
"$bin/momoe-data" prepare --out "$run/wtds" --wikitext "$run/wt" > /dev/null 2>&1 || fail "--wikitext"
"$bin/momoe-data" info "$run/wtds" | grep -qE "valid +17 tokens, 17 words, 60 B of text, 5.88% <unk>" || { "$bin/momoe-data" info "$run/wtds"; fail "WikiText token count"; }
expect_code 2 "wiki.train.raw" "$bin/momoe-data" prepare --out "$run/wtraw" --wikitext "$run/wt" --raw

# Bad input: exit 2, naming the problem.
expect_code 2 "is a FIFO" bash -c "mkfifo '$run/fifo' && '$bin/momoe-data' prepare --out '$run/o1' --train '$run/fifo'"
expect_code 2 "input not found: $run/missing.txt" "$bin/momoe-data" prepare --out "$run/o2" --train "$run/missing.txt"
expect_code 2 "other inputs or options" "$bin/momoe-data" prepare --out "$run/ds" --train "$brown/train.txt.gz"
expect_code 2 "--train) is required" "$bin/momoe-data" prepare --out "$run/o3"
expect_code 2 "not a prepared dataset" "$bin/momoe-data" verify "$run/wt"
# A text file is not a dataset: the hint prepares a new folder from it, never --out the file.
for cmd in verify info; do
  expect_code 2 "$run/wt/wiki.valid.tokens is a file, not a prepared dataset folder" "$bin/momoe-data" "$cmd" "$run/wt/wiki.valid.tokens"
  expect_in "$run/err" "momoe-data prepare --out NEW_FOLDER --train $run/wt/wiki.valid.tokens"
  grep -qF -- "--out $run/wt/wiki.valid.tokens" "$run/err" && fail "momoe-data $cmd suggests preparing over the text file"
done
expect_code 2 "momoe-data prepare --train $run/wt/wiki.valid.tokens --out NEW_DIR" "$bin/momoe-train" --config "$config" \
  --run-dir "$run/x" --set data.dataset="$run/wt/wiki.valid.tokens"
grep -qF -- "--out $run/wt/wiki.valid.tokens" "$run/err" && fail "momoe-train suggests preparing over the text file"
expect_code 2 "unknown command 'frobnicate'" "$bin/momoe-data" frobnicate
expect_code 2 "data.dataset ($run/ds) and data.train" "$bin/momoe-train" --config "$config" --run-dir "$run/x" \
  --set data.dataset="$run/ds" --set data.train="$brown/train.txt.gz"
expect_code 2 "not a prepared dataset" "$bin/momoe-train" --config "$config" --run-dir "$run/x" --set data.dataset="$run/wt"
cp -r "$run/ds" "$run/damaged"
printf 'XXXX' | dd of="$run/damaged/train-00001.tok" bs=1 seek=100 conv=notrunc 2> /dev/null
expect_code 2 "train-00001.tok is corrupted" "$bin/momoe-data" verify "$run/damaged"
expect_code 2 "train-00001.tok is corrupted" "$bin/momoe-train" --config "$config" --run-dir "$run/x" --set data.dataset="$run/damaged"

# SentencePiece.
sp_flags=(--tokenizer sentencepiece --sp-vocab-size 600 --sp-max-sentences 6000)
if [ "$sp" = 1 ]; then
  # It lives in momoe-data only: Debian's libsentencepiece cannot share a process with libprotobuf.
  readelf -d "$bin/momoe-data" | grep NEEDED | grep -q libprotobuf && fail "momoe-data links libprotobuf"
  for exe in momoe-train momoe-eval; do
    readelf -d "$bin/$exe" | grep NEEDED | grep -q libsentencepiece && fail "$exe links libsentencepiece"
  done
  "$bin/momoe-data" prepare --out "$run/spds" --train "$brown/train.txt.gz" --valid "$brown/valid.txt.gz" \
    --test "$brown/test.txt.gz" "${sp_flags[@]}" > "$run/sp.log" 2>&1 || { cat "$run/sp.log"; fail "SentencePiece prepare"; }
  "$bin/momoe-data" info "$run/spds" | grep -q "tokenizer sentencepiece of 600 tokens" || fail "SentencePiece info"
  "$bin/momoe-train" --config "$config" --run-dir "$run/sp1" --set train.steps=4 --set train.eval_sequences=8 \
    --set data.dataset="$run/spds" > "$run/sp1.log" 2>&1 || { cat "$run/sp1.log"; fail "training on the SentencePiece dataset"; }
  grep -q "SentencePiece model of 600 pieces (byte fallback" "$run/sp1.log" || { cat "$run/sp1.log"; fail "start-up line"; }
  grep -q "word-swap attack evaluation (train.attack_rate) does not run" "$run/sp1.log" || fail "no attack note"
  "$bin/momoe-train" --config "$config" --run-dir "$run/sp2" --set train.steps=4 --set train.eval_sequences=8 \
    --set data.tokenizer.kind=SENTENCEPIECE --set data.tokenizer.vocab_size=600 \
    --set data.tokenizer.max_sentences=6000 > "$run/sp2.log" 2>&1 || { cat "$run/sp2.log"; fail "training on text with SentencePiece"; }
    diff <(losses "$run/sp1.log") <(losses "$run/sp2.log") || fail "SentencePiece: dataset and text runs differ"
  # SIGTERM while momoe-train prepares its SentencePiece cache (a bigger model: training it takes
  # a few seconds): the momoe-data child is stopped too (no orphan), exit 3, and the same command
  # then resumes the preparation and trains.
  sp3=(--config "$config" --run-dir "$run/sp3" --set train.steps=2 --set train.eval_sequences=8
       --set train.final_eval=NONE --set data.tokenizer.kind=SENTENCEPIECE --set data.tokenizer.vocab_size=4000)
  child_pattern="momoe-data prepare --out $run/sp3"
  "$bin/momoe-train" "${sp3[@]}" > "$run/sp3.log" 2>&1 &
  pid=$!
  # The signal must find the child running: wait (at most 60 s) until it exists.
  child=
  for _ in $(seq 600); do
    child=$(pgrep -f -- "$child_pattern" | head -1)
    [ -n "$child" ] && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.1
  done
  [ -n "$child" ] || { cat "$run/sp3.log"; fail "momoe-train never ran '$child_pattern ...'"; }
  kill -TERM "$pid"
  wait "$pid"; rc=$?
  [ "$rc" -eq 3 ] || { cat "$run/sp3.log"; fail "SIGTERM while preparing: exit $rc, expected 3"; }
  # The signal reached the preparation (not a training step after it) ...
  grep -F "$child_pattern/" "$run/sp3.log" | grep -qF "was stopped" ||
    { cat "$run/sp3.log"; fail "the log does not say the preparation (pid $child) was stopped"; }
  # ... and momoe-train waited for its child: gone the moment momoe-train has exited, no grace.
  pgrep -f -- "$child_pattern" > /dev/null && fail "an orphan momoe-data prepare (pid $child) is left running"
  "$bin/momoe-train" "${sp3[@]}" > "$run/sp3b.log" 2>&1 || { cat "$run/sp3b.log"; fail "the run after SIGTERM"; }
  grep -q "^step 2/2" "$run/sp3b.log" || { cat "$run/sp3b.log"; fail "the run after SIGTERM did not train"; }
  diff <(evals "$run/sp1.log") <(evals "$run/sp2.log") || fail "SentencePiece: evaluations differ"
  ls "$run/sp1/ckpt-00000004/tokenizer.model" "$run/sp1/ckpt-00000004/tokenizer.json" > /dev/null || fail "checkpoint lacks the model"
  "$bin/momoe-eval" --checkpoint "$run/sp1/ckpt-00000004" --text "$brown/test.txt.gz" --max-sequences 8 > "$run/speval" ||
    fail "momoe-eval on a SentencePiece checkpoint"
  grep -q '"word_ppl_estimate"' "$run/speval" && grep -q '"attack":"not run' "$run/speval" || { cat "$run/speval"; fail "momoe-eval output"; }
  # Its ppl equals the trainer's evaluation on the same text (the test split, first 8 sequences).
  want=$(grep -oE "first 8 sequences of each split\): valid ppl [0-9.]+ \| test ppl [0-9.]+" "$run/sp1.log" | grep -oE "[0-9.]+$")
  got=$(grep -oE '"ppl":[0-9.]+' "$run/speval" | cut -d: -f2)
  awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-3 * a) }' ||
    fail "momoe-eval ppl $got differs from the trainer's test ppl $want"
  # A checkpoint whose model was replaced (with its description) is refused by name.
  cp -r "$run/sp1/ckpt-00000004" "$run/swapped"
  "$bin/momoe-data" prepare --out "$run/spds2" --train "$brown/valid.txt.gz" "${sp_flags[@]}" > /dev/null 2>&1 || fail "second model"
  cp "$run/spds2/tokenizer.model" "$run/spds2/tokenizer.json" "$run/swapped/"
  expect_code 1 "is not the tokenizer the manifest records" "$bin/momoe-eval" --checkpoint "$run/swapped" --text "$brown/test.txt.gz"
  cp "$run/sp1/ckpt-00000004/tokenizer.json" "$run/swapped/"
  expect_code 1 "tokenizer.model has fingerprint" "$bin/momoe-eval" --checkpoint "$run/swapped" --text "$brown/test.txt.gz"
else
  expect_code 2 "libsentencepiece-dev" "$bin/momoe-data" prepare --out "$run/spx" --train "$brown/valid.txt.gz" "${sp_flags[@]}"
  expect_code 2 "libsentencepiece-dev" "$bin/momoe-train" --config "$config" --run-dir "$run/spx" \
    --set data.tokenizer.kind=SENTENCEPIECE
fi

for sub in prepare verify info tokenize; do
  "$bin/momoe-data" "$sub" --help > "$run/help" || fail "momoe-data $sub --help"
  grep -q "example:" "$run/help" || fail "momoe-data $sub --help has no example"
done
"$bin/momoe-data" --help | grep -q prepare || fail "momoe-data --help"
echo PASS
