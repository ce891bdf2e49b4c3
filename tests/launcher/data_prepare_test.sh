#!/usr/bin/env bash
# momoe-data prepare as a user meets it on a small corpus, in seconds: `info` names every file a
# dataset (and its vocabulary) came from; bad text found before anything worth resuming was
# written leaves no folder to refuse the fixed retry; a damaged dataset (a corrupted or truncated shard, a
# swapped vocabulary) exits 2 from verify (listing every damaged shard) and from momoe-train,
# saying how to repair it. With SentencePiece: progress lines while a model trains, and SIGINT
# there stops momoe-data within a second (exit 3), leaving no trainer process behind; so does
# SIGINT while it tokenizes. The progress bar is over all the splits' input, so 100% comes once,
# at the end. A preparation killed part-way (MOMOE_CRASH_AT: SIGKILL at the n-th rename) resumes
# inside its open shard, says so, and ends with the same files as an uninterrupted one.
# Usage: data_prepare_test.sh BIN_DIR SRC_DIR [SP=0|1]
set -u
bin=$1
src=$2
sp=${3:-0}
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
# interrupt_within PID LIMIT_MS LOG WHAT: SIGINT to PID, which must exit 3 (stopped) within
# LIMIT_MS milliseconds; else LOG is shown and WHAT fails.
interrupt_within() {
  local t0 rc ms
  kill -INT "$1"
  t0=$(date +%s%N)
  wait "$1"; rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$rc" -eq 3 ] || { cat "$3"; fail "$4: exit $rc, expected 3"; }
  [ "$ms" -le "$2" ] || { cat "$3"; fail "$4: stopped after $ms ms"; }
}
export EXPECT_DIR=$run  # expect_code's out and err
# A few thousand lines of the bundled corpus, cut into three training files and one to validate.
zcat "$src/data/brown/train.txt.gz" | head -n 6000 > "$run/all.txt"
split -l 2000 -d --additional-suffix=.txt "$run/all.txt" "$run/part"
zcat "$src/data/brown/valid.txt.gz" | head -n 500 > "$run/valid.txt"
parts=("$run"/part0{0,1,2}.txt)
prep=(prepare --train "${parts[0]}" --train "${parts[1]}" --train "${parts[2]}" --valid "$run/valid.txt"
      --vocab-max-size 3000 --threads 1 --chunk-mb 1 --shard-tokens 20000)

# info: the vocabulary came from all three training files, and each split lists its files.
"$bin/momoe-data" "${prep[@]}" --out "$run/ds" --quiet || fail "prepare"
"$bin/momoe-data" info "$run/ds" > "$run/info" || fail "info"
expect_in "$run/info" "built from the train split's 3 file(s)"
for f in "${parts[@]}" "$run/valid.txt"; do expect_in "$run/info" "$f"; done

# Bad input found before anything worth resuming was written (invalid UTF-8 in the training text,
# met by the vocabulary's pass): exit 2, and no folder left to refuse the fixed retry.
printf 'ok\n\xff\xfe bad\n' > "$run/bad.txt"
expect_code 2 "nothing was prepared yet, so $run/badds is removed" \
  "$bin/momoe-data" prepare --out "$run/badds" --train "$run/bad.txt" --valid "$run/valid.txt" --quiet
expect_in "$run/err" "invalid UTF-8 in $run/bad.txt at line 2"
expect_no_file "$run/badds" "a preparation that wrote nothing worth resuming"
printf 'ok\nnow good\n' > "$run/bad.txt"
"$bin/momoe-data" prepare --out "$run/badds" --train "$run/bad.txt" --valid "$run/valid.txt" --quiet ||
  fail "the same command with the text fixed"

# Damage: one shard corrupted, another truncated. verify lists both, exits 2, says how to repair.
cp -r "$run/ds" "$run/bad"
[ "$(find "$run/bad" -name 'train-*.tok' | wc -l)" -ge 2 ] || fail "expected 2 or more train shards"
printf '\xff\xff\xff\x7f' | dd of="$run/bad/train-00000.tok" bs=1 seek=100 conv=notrunc status=none
truncate -s -8 "$run/bad/train-00001.tok"
expect_code 2 "has 2 damaged shard(s)" "$bin/momoe-data" verify "$run/bad"
expect_in "$run/err" "train-00000.tok is corrupted"
expect_in "$run/err" "train-00001.tok"
expect_in "$run/err" "remove $run/bad and prepare it again: momoe-data prepare --out $run/bad --train ${parts[0]}"
# Training from it: exit 2 (the input must change), pointing at verify.
config=$src/tests/launcher/tiny_config.pbtxt
expect_code 2 "run \`momoe-data verify $run/bad\` to see every damaged file" \
  "$bin/momoe-train" --config "$config" --run-dir "$run/r" --set train.steps=1 --set data.dataset="$run/bad"
# A swapped vocabulary (another preparation's): verify and training exit 2, saying what to do.
"$bin/momoe-data" prepare --train "${parts[1]}" --vocab-max-size 2000 --out "$run/other" --quiet ||
  fail "prepare another dataset"
cp -r "$run/ds" "$run/swap"
cp "$run/other/vocab.txt" "$run/swap/vocab.txt"
expect_code 2 "and prepare it again" "$bin/momoe-data" verify "$run/swap"
expect_in "$run/err" "vocabulary mismatch"
expect_code 2 "momoe-data verify $run/swap" \
  "$bin/momoe-train" --config "$config" --run-dir "$run/r" --set train.steps=1 --set data.dataset="$run/swap"

# An uncapped word vocabulary of a whole corpus (Brown's training split: 49,370 words) is warned
# about, naming the flag that caps it, even with --quiet; a capped one (below) is not.
"$bin/momoe-data" prepare --out "$run/uncapped" --train "$src/data/brown/train.txt.gz" --quiet \
  2> "$run/uncapped.err" || { cat "$run/uncapped.err"; fail "prepare uncapped"; }
expect_in "$run/uncapped.err" "the word vocabulary is uncapped: 49,370 words"
expect_in "$run/uncapped.err" "--vocab-max-size"
# Progress: the bar counts the input tokenized and written, over every split: 100% once, last.
brown=(--train "$src/data/brown/train.txt.gz" --valid "$src/data/brown/valid.txt.gz" --threads 1 --chunk-mb 1
       --vocab-max-size 5000 --shard-tokens 600000)
MOMOE_PROGRESS_SECONDS=0 MOMOE_CRASH_TRACE=1 "$bin/momoe-data" prepare --out "$run/ref" "${brown[@]}" \
  > "$run/ref.log" 2>&1 || { cat "$run/ref.log"; fail "prepare the reference"; }
grep "^tokenizing " "$run/ref.log" > "$run/bar"
grep -q "vocabulary is uncapped" "$run/ref.log" && fail "a capped vocabulary was warned about"
[ "$(wc -l < "$run/bar")" -ge 3 ] || { cat "$run/ref.log"; fail "too few progress lines"; }
if [ "$(grep -c "100\.0%" "$run/bar")" -ne 1 ] || ! tail -1 "$run/bar" | grep -q "^tokenizing valid: .*(100\.0%)"; then
  cat "$run/bar"
  fail "the bar is at 100% before the last split is tokenized"
fi

# Killed part-way: in the first shard (before and after its rename) and in the second.
point() { grep -F "rename $run/ref/$1.tmp ->" "$run/ref.log" | grep -oE "point [0-9]+" | grep -oE "[0-9]+"; }
s0=$(point train-00000.tok)
s1=$(point train-00001.tok)
if [ -z "$s0" ] || [ -z "$s1" ]; then cat "$run/ref.log"; fail "no crash points for the shards"; fi
for at in "$s0:0" "$((s0 + 1)):0" "$((s1 - 1)):1"; do
  n=${at%:*}
  out=$run/crash$n
  # In a subshell, which reports the kill to /dev/null.
  (MOMOE_CRASH_AT=$n "$bin/momoe-data" prepare --out "$out" "${brown[@]}" --quiet; echo $? > "$run/rc") > /dev/null 2>&1
  [ "$(cat "$run/rc")" -eq 137 ] || fail "MOMOE_CRASH_AT=$n: exit $(cat "$run/rc"), expected 137 (SIGKILL)"
  expect_code 0 "resuming the train split of $out" "$bin/momoe-data" prepare --out "$out" "${brown[@]}"
  grep -qE "${at#*:} shard\(s\) written, and [1-9][0-9]* token\(s\) of $out/train-0000${at#*:}.tok kept" "$run/err" ||
    { cat "$run/err"; fail "crash at point $n: did not resume inside shard ${at#*:}"; }
  for f in "$run/ref"/*.tok "$run/ref/index.json" "$run/ref/vocab.txt"; do
    cmp -s "$f" "$out/$(basename "$f")" || fail "crash at point $n: $(basename "$f") differs from an uninterrupted preparation"
  done
done

if [ "$sp" = 1 ]; then
  # A unigram model of 8000 pieces on the bundled training text trains for several seconds.
  out=$run/spstop
  MOMOE_PROGRESS_SECONDS=0.2 "$bin/momoe-data" prepare --out "$out" --train "$src/data/brown/train.txt.gz" \
    --tokenizer sentencepiece --sp-type unigram --sp-vocab-size 8000 > "$run/sp.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    grep -qs "sentencepiece: training the unigram model of 8,000 pieces on 46,175 sentences" "$run/sp.log" && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.05
  done
  expect_in "$run/sp.log" "sentencepiece: training the unigram model of 8,000 pieces on 46,175 sentences"
  interrupt_within "$pid" 1500 "$run/sp.log" "SIGINT while training SentencePiece"
  expect_in "$run/sp.log" "stopped while training the SentencePiece model"
  pgrep -f -- "prepare --out $out" > /dev/null && fail "a SentencePiece trainer is left running"
  grep -q "saving a checkpoint" "$run/sp.log" && fail "momoe-data speaks of a checkpoint"

  # SIGINT while tokenizing with SentencePiece (about 2 MB/s): stopped within a second, between
  # two pieces of a chunk, saying what is kept.
  "$bin/momoe-data" prepare --out "$run/spm" --train "${parts[0]}" --tokenizer sentencepiece \
    --sp-vocab-size 600 --quiet || fail "prepare a small SentencePiece model"
  "$bin/momoe-data" prepare --out "$run/sptok" --train "$src/data/brown/train.txt.gz" --tokenizer sentencepiece \
    --sp-model "$run/spm/tokenizer.model" --threads 1 --chunk-mb 4 > "$run/sptok.log" 2>&1 &
  pid=$!
  sleep 0.5
  interrupt_within "$pid" 1000 "$run/sptok.log" "SIGINT while tokenizing"
  expect_in "$run/sptok.log" "written and kept; rerun the same command to continue from line"
  # Only an open shard (a resume point's) may stay as a temporary file.
  [ -z "$(find "$run/sptok" -name '*.tmp*' ! -name '*.tok.tmp')" ] || { ls "$run/sptok"; fail "temporary files left"; }
fi
echo PASS
