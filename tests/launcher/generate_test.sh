#!/usr/bin/env bash
# momoe-generate as a user runs it, on a tiny model trained for a few steps: the same seed gives
# the same text (on 1 and 2 threads), another seed another text; temperature 0 is deterministic
# and equals top-k 1; exactly --max-tokens tokens are generated, and stdout is the tokenizer's
# decoding of the prompt and them; a longer run continues a shorter one; generation runs past
# seq_len; unknown prompt words exit 2 naming them (or read as <unk> with --allow-unknown); a run
# directory, a missing checkpoint and bad flags are refused; --help.
# With SentencePiece in the build (SP=1): a SentencePiece checkpoint generates through
# `momoe-data tokenize` children (momoe-generate does not link libsentencepiece), and the filter
# itself encodes, decodes and refuses bad input.
# Usage: generate_test.sh BIN_DIR CONFIG [SP=0|1]
set -u
bin=$1
config=$2
sp=${3:-0}
src=$(cd "$(dirname "$config")/../.." && pwd)
brown=$src/data/brown
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
export OPENBLAS_NUM_THREADS=1
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
export EXPECT_DIR=$run  # expect_code's out and err
gen() {  # gen OUT FLAGS...: stdout to OUT, stderr to OUT.err
  local out=$1; shift
  "$bin/momoe-generate" "$@" > "$out" 2> "$out.err" || { cat "$out.err"; fail "momoe-generate $* failed"; }
}
# check_ids OUT N VOCAB: OUT.err's --ids line has N generated ids, and OUT is exactly the decoding
# of the prompt's and the generated ids (momoe-data tokenize --decode with the checkpoint's
# tokenizer file VOCAB), plus the final newline when the text does not end with one.
check_ids() {
  local out=$1 n=$2 vocab=$3
  grep '^{"prompt_ids"' "$out.err" > "$out.json" || { cat "$out.err"; fail "$out: no --ids line"; }
  /usr/bin/python3 - "$out.json" "$n" > "$out.req" << 'EOF' || fail "$out: wrong number of generated ids"
import json, sys
j = json.load(open(sys.argv[1]))
if len(j["ids"]) != int(sys.argv[2]):
    sys.exit("generated %d ids, expected %s" % (len(j["ids"]), sys.argv[2]))
# An empty prompt is the end-of-line id alone and prints nothing.
prompt = [] if j["prompt_ids"] == [1] else j["prompt_ids"]
print(" ".join(str(i) for i in prompt + j["ids"]))
EOF
  "$bin/momoe-data" tokenize --model "$vocab" --decode < "$out.req" > "$out.dec" || fail "$out: decode"
  /usr/bin/python3 - "$out" "$out.dec" << 'EOF' || fail "$out is not the decoding of its ids"
import sys
got = open(sys.argv[1], encoding="utf-8", errors="surrogateescape").read()
want = open(sys.argv[2], encoding="utf-8", errors="surrogateescape").read()[:-1]
want = want.replace("\\\\", "\0").replace("\\n", "\n").replace("\0", "\\")
if not want.endswith("\n"):
    want += "\n"
if got != want:
    sys.exit("stdout %r\ndecoded %r" % (got, want))
EOF
}

"$bin/momoe-train" --config "$config" --run-dir "$run/r" --set train.steps=6 --set train.eval_sequences=8 \
  --set train.final_eval=NONE > "$run/train.log" 2>&1 || { cat "$run/train.log"; fail "momoe-train failed"; }
ckpt=$run/r/ckpt-00000006
vocab=$ckpt/vocab.txt
prompt="The jury said"

# (1) A seed gives one text, on any thread count; another seed another text.
gen "$run/a" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 30 --seed 7 --threads 1 --ids
gen "$run/b" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 30 --seed 7 --threads 2
gen "$run/c" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 30 --seed 8 --threads 1
cat "$run/a"
cmp -s "$run/a" "$run/b" || fail "seed 7 gave different texts on 1 and 2 threads"
cmp -s "$run/a" "$run/c" && fail "seeds 7 and 8 gave the same text"
grep -q "^The jury said " "$run/a" || fail "stdout does not start with the prompt"
grep -q "momoe-generate: checkpoint $ckpt (step 6), word vocabulary of 2000 words" "$run/a.err" ||
  { cat "$run/a.err"; fail "no start-up line on stderr"; }
# (3) Exactly --max-tokens tokens, and stdout is their text.
check_ids "$run/a" 30 "$vocab"
# (2) Greedy is deterministic and is top-k 1 (whatever the seed).
gen "$run/g1" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 12 --temperature 0 --seed 1
gen "$run/g2" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 12 --temperature 0 --seed 2
gen "$run/k1" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 12 --top-k 1 --seed 3
cmp -s "$run/g1" "$run/g2" || fail "--temperature 0 depends on the seed"
cmp -s "$run/g1" "$run/k1" || { cat "$run/g1" "$run/k1"; fail "--temperature 0 differs from --top-k 1"; }
# top-k and top-p sample (and stay deterministic).
gen "$run/p1" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 20 --top-k 40 --top-p 0.9 --temperature 0.8 --ids
gen "$run/p2" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 20 --top-k 40 --top-p 0.9 --temperature 0.8
cmp -s "$run/p1" "$run/p2" || fail "top-k/top-p sampling is not deterministic"
check_ids "$run/p1" 20 "$vocab"
# (5) Past seq_len (16): 40 tokens, and the first 30 are the 30 of the shorter run (each draw is
# keyed by the token's position).
gen "$run/long" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 40 --seed 7 --ids
check_ids "$run/long" 40 "$vocab"
/usr/bin/python3 - "$run/a.json" "$run/long.json" << 'EOF' || fail "the 40-token run does not continue the 30-token run"
import json, sys
a, b = (json.load(open(p))["ids"] for p in sys.argv[1:])
sys.exit(0 if b[:30] == a else "%s\n%s" % (a, b[:30]))
EOF
# An empty prompt starts a line; a prompt file ending with a newline too; --max-tokens 0.
gen "$run/e" --checkpoint "$ckpt" --max-tokens 10 --seed 1 --ids
check_ids "$run/e" 10 "$vocab"
printf 'The jury said .\nIt was\n' > "$run/prompt.txt"
gen "$run/f" --checkpoint "$ckpt" --prompt-file "$run/prompt.txt" --max-tokens 10 --ids
check_ids "$run/f" 10 "$vocab"
head -2 "$run/f" | cmp -s - "$run/prompt.txt" || fail "the prompt file's lines are not printed first"
gen "$run/z" --checkpoint "$ckpt" --prompt "$prompt" --max-tokens 0
[ "$(cat "$run/z")" = "$prompt" ] || fail "--max-tokens 0 printed '$(cat "$run/z")'"

# (4) Unknown words: refused naming them (exit 2), or read as <unk>.
expect_code 2 '"Zyzzyva", "qwxz"' "$bin/momoe-generate" --checkpoint "$ckpt" --prompt "The Zyzzyva said qwxz Zyzzyva"
grep -q "2 word(s)" "$run/err" && grep -q -- "--allow-unknown" "$run/err" || { cat "$run/err"; fail "unknown-word message"; }
[ -s "$run/out" ] && fail "a refused prompt printed text"
gen "$run/u" --checkpoint "$ckpt" --prompt "The Zyzzyva said" --max-tokens 3 --allow-unknown
grep -q "^The <unk> said " "$run/u" || { cat "$run/u"; fail "--allow-unknown"; }
# Bad input.
expect_code 2 "is a run directory, not a checkpoint: its newest is $ckpt" "$bin/momoe-generate" --checkpoint "$run/r" --prompt x
expect_code 2 "not both" "$bin/momoe-generate" --checkpoint "$ckpt" --prompt x --prompt-file "$run/prompt.txt"
expect_code 2 "--checkpoint DIR is required" "$bin/momoe-generate" --prompt x
expect_code 2 "--top-p 1.5 must be in (0, 1]" "$bin/momoe-generate" --checkpoint "$ckpt" --top-p 1.5
expect_code 2 "--temperature -1 must be >= 0" "$bin/momoe-generate" --checkpoint "$ckpt" --temperature -1
expect_code 2 "missing.txt" "$bin/momoe-generate" --checkpoint "$ckpt" --prompt-file "$run/missing.txt"
expect_code 2 "--device tpu is not one of cpu, cuda" "$bin/momoe-generate" --checkpoint "$ckpt" --device tpu
# (6) --help.
"$bin/momoe-generate" --help > "$run/help" || fail "--help exited non-zero"
grep -q "^example: momoe-generate --checkpoint" "$run/help" && grep -q -- "--top-p" "$run/help" ||
  { cat "$run/help"; fail "--help"; }

if [ "$sp" = 1 ]; then
  readelf -d "$bin/momoe-generate" | grep NEEDED | grep -q libsentencepiece && fail "momoe-generate links libsentencepiece"
  "$bin/momoe-data" prepare --out "$run/spds" --train "$brown/valid.txt.gz" --valid "$brown/valid.txt.gz" \
    --test "$brown/test.txt.gz" --tokenizer sentencepiece --sp-vocab-size 600 --sp-max-sentences 3000 --quiet \
    > "$run/sp.log" 2>&1 || { cat "$run/sp.log"; fail "SentencePiece prepare"; }
  "$bin/momoe-train" --config "$config" --run-dir "$run/sp" --set train.steps=4 --set train.eval_sequences=8 \
    --set train.final_eval=NONE --set data.dataset="$run/spds" > "$run/sptrain.log" 2>&1 ||
    { cat "$run/sptrain.log"; fail "training on the SentencePiece dataset"; }
  spckpt=$run/sp/ckpt-00000004
  model=$spckpt/tokenizer.model
  # The filter: text -> ids -> the same text; bad input exits 2 naming it.
  printf 'The jury said h\xc3\xa9llo\n\n  two  spaces \\ here\n' > "$run/lines"
  "$bin/momoe-data" tokenize --model "$model" --encode < "$run/lines" > "$run/lines.ids" || fail "tokenize --encode"
  [ "$(wc -l < "$run/lines.ids")" -eq 3 ] && [ -z "$(sed -n 2p "$run/lines.ids")" ] ||
    { cat "$run/lines.ids"; fail "tokenize --encode: one line per line (empty for a blank one)"; }
  sed -n 1p "$run/lines.ids" | grep -qE '^[0-9]+( [0-9]+)* 1$' || fail "an encoded line ends with the end-of-line id"
  "$bin/momoe-data" tokenize --model "$model" --decode < "$run/lines.ids" > "$run/lines.dec" || fail "tokenize --decode"
  printf 'The jury said h\xc3\xa9llo\\n\n\n  two  spaces \\\\ here\\n\n' | cmp -s - "$run/lines.dec" ||
    { cat "$run/lines.dec"; fail "tokenize --decode does not give the lines back"; }
  expect_code 2 "'600' is not an id" sh -c "echo '5 600' | '$bin/momoe-data' tokenize --model '$model' --decode"
  expect_code 1 "not 0x0000000000000001" sh -c "echo x | '$bin/momoe-data' tokenize --model '$model' --encode --fingerprint 0x0000000000000001"
  expect_code 2 "one of --encode, --decode" "$bin/momoe-data" tokenize --model "$model"
  # Generation through the filter: deterministic, exactly --max-tokens ids, stdout their text.
  gen "$run/s1" --checkpoint "$spckpt" --prompt "The jury said h$(printf '\xc3\xa9')llo" --max-tokens 40 --seed 3 --ids
  gen "$run/s2" --checkpoint "$spckpt" --prompt "The jury said h$(printf '\xc3\xa9')llo" --max-tokens 40 --seed 3 --threads 2
  cat "$run/s1"
  cmp -s "$run/s1" "$run/s2" || fail "SentencePiece: seed 3 gave different texts"
  check_ids "$run/s1" 40 "$model"
  gen "$run/s3" --checkpoint "$spckpt" --max-tokens 30 --seed 4 --ids
  check_ids "$run/s3" 30 "$model"
  pgrep -f "momoe-data tokenize --model $model" > /dev/null && fail "a momoe-data tokenize child is left running"
  # A momoe-data that cannot be started is named.
  MOMOE_DATA=$run/no-such-momoe-data expect_code 1 "cannot start $run/no-such-momoe-data" \
    "$bin/momoe-generate" --checkpoint "$spckpt" --prompt x
fi
echo PASS
