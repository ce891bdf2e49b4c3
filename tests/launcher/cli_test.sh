#!/usr/bin/env bash
# The executables as a user runs them: momoe-train on the bundled corpus (tiny model), then
# momoe-stats (table, CSV, JSON, --follow, PNG plot) and momoe-eval on a text file; and the errors
# a user can make (missing config, unknown flag, bad --set, an output folder that does not exist,
# a mistyped benchmark) exit non-zero naming the problem (bad input: exit 2).
# Usage: cli_test.sh BIN_DIR CONFIG
set -u
bin=$1
config=$2
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
export OPENBLAS_NUM_THREADS=1
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code

MOMOE_PROGRESS_SECONDS=0 "$bin/momoe-train" --config "$config" --run-dir "$run" --set train.steps=4 \
  --set train.eval_sequences=8 > "$run/train.log" 2>&1 || { cat "$run/train.log"; fail "momoe-train failed"; }
# The ETA counts the evaluations to come; long evaluations show their progress.
grep -qE "step 1/4 .* ETA [0-9hms]+ \(evaluation [0-9hms]+\)" "$run/train.log" ||
  { cat "$run/train.log"; fail "the ETA does not count the final evaluation"; }
grep -qE "^eval at step 4: [0-9]+/[0-9]+ sequences \(.*\), [0-9]+ tok/s, ETA " "$run/train.log" ||
  { cat "$run/train.log"; fail "no evaluation progress line"; }
grep -q "step 4/4 | loss" "$run/train.log" || { cat "$run/train.log"; fail "no progress line"; }
grep -qF "eval at step 4 (first 8 sequences of each split): valid ppl" "$run/train.log" ||
  { cat "$run/train.log"; fail "no evaluation line"; }
# A subset's measures per word and per byte are estimates at the whole split's ratios, and say so.
grep -E "eval at step 4 \(first 8 sequences of each split\).* valid [0-9.]+ per word, [0-9.]+ bits/byte \(estimates at the whole split's tokens per word and per byte; [0-9]+\.[0-9]{2}% <unk>\)$" "$run/train.log" > /dev/null ||
  { cat "$run/train.log"; fail "the subset's per-word measures are not labelled estimates"; }
grep -qF "eval at step 4 (whole splits): valid ppl" "$run/train.log" ||
  { cat "$run/train.log"; fail "no whole-split evaluation line"; }
# Per-word measures carry the evaluated text's <unk> share beside them (they compare across
# tokenizers only at equal shares), in the log and in momoe-stats' summary (below).
grep -qE "eval at step 4 \(whole splits\).* valid [0-9.]+ per word, [0-9.]+ bits/byte \([0-9]+\.[0-9]{2}% <unk>\)$" "$run/train.log" ||
  { cat "$run/train.log"; fail "no <unk> share beside the per-word measures"; }
# Every text is named, with its size and the share the vocabulary does not know.
grep -qE "momoe: data: train .*brown/train.txt.gz \([0-9]+ tokens, [0-9.]+% <unk>\); valid .*brown/valid.txt.gz \(.*; test .*brown/test.txt.gz \(" "$run/train.log" ||
  { cat "$run/train.log"; fail "the start-up line does not name the texts"; }

"$bin/momoe-stats" "$run" --csv "$run/s.csv" --json "$run/s.jsonl" > "$run/table" || fail "momoe-stats failed"
cat "$run/table"
grep -q "steps recorded: 4" "$run/table" || fail "summary table"
grep -qE "valid bits per byte [0-9.]+ \([0-9]+\.[0-9]{2}% of the valid text <unk>\)" "$run/table" ||
  fail "momoe-stats' summary has no <unk> share beside the per-word measures"
grep -qE "realised swap fraction 0\.02[0-9]{2}\)" "$run/table" || fail "the swap fraction is rounded away"
[ "$(wc -l < "$run/s.csv")" -eq 11 ] || fail "CSV should have 1 + 4 steps x 2 layers + 2 evaluation rows"
[ "$(wc -l < "$run/s.jsonl")" -eq 6 ] || fail "JSON should have 4 steps + 2 evaluations (subset, whole)"
grep -q '"eval_sequences":8' "$run/s.jsonl" && grep -q '"eval_sequences":0' "$run/s.jsonl" ||
  fail "JSON lacks the subset or the whole-split evaluation"
[ "$(grep -c ',8,[0-9.]*,[0-9.]*,' "$run/s.csv")" -ge 1 ] || { cat "$run/s.csv"; fail "CSV lacks evaluation rows"; }
# The step's timing breakdown: in the summary, per training step in the JSON and the CSV (every
# row has the header's columns), and each evaluation's seconds.
grep -qE "time per step \(mean of the last 4\): [0-9.]+ ms = data [0-9.]+ \+ forward [0-9.]+" "$run/table" ||
  fail "the summary has no timing breakdown"
[ "$(grep -c '"phase_seconds":{"backward":[0-9.e-]*,"data"' "$run/s.jsonl")" -eq 4 ] ||
  fail "JSON training steps lack phase_seconds"
[ "$(grep -c '"eval_seconds":' "$run/s.jsonl")" -eq 2 ] || fail "JSON evaluations lack eval_seconds"
[ "$(awk -F, '{print NF}' "$run/s.csv" | sort -u | wc -l)" -eq 1 ] || fail "CSV rows differ in width"
head -1 "$run/s.csv" | grep -q ",forward_seconds,backward_seconds,exchange_seconds," || fail "CSV phase columns"
# The step's measured memory peaks: on every training step of the JSON (none on an evaluation's
# line), the CSV's last columns and the summary.
[ "$(grep -c '"peak_rss_bytes":[1-9][0-9]*,"peak_tensor_bytes":[1-9][0-9]*' "$run/s.jsonl")" -eq 4 ] ||
  fail "JSON training steps lack their memory peaks"
[ "$(grep -c 'peak_' "$run/s.jsonl")" -eq 4 ] || fail "JSON evaluations carry memory peaks"
head -1 "$run/s.csv" | grep -q ",eval_seconds,peak_tensor_bytes,peak_rss_bytes$" || fail "CSV memory columns"
grep -qE "peak memory per step \(the largest of the last 4, the largest rank's\): tensors [0-9.]+ GiB, resident [0-9.]+ GiB" "$run/table" ||
  fail "the summary has no memory peaks"
# The live metrics the trainer appended are the same records, line for line (log_every 1).
[ -s "$run/metrics.jsonl" ] || fail "no metrics.jsonl"
cmp "$run/metrics.jsonl" "$run/s.jsonl" || { diff "$run/metrics.jsonl" "$run/s.jsonl" | head; fail "metrics.jsonl differs from momoe-stats --json"; }
/usr/bin/python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$run/metrics.jsonl" ||
  fail "metrics.jsonl is not JSON lines"
# One step numbering ("step N" = after N optimizer updates) across the console, metrics.jsonl,
# stats.pb (momoe-stats --json and its summary), the evaluations, momoe-stats --follow and the
# checkpoint: the 4th and last step is 4 everywhere, the first is 1.
steps_of() { /usr/bin/python3 -c 'import json, sys
print(" ".join(str(r["step"]) for r in map(json.loads, open(sys.argv[1])) if "loss" in r))' "$1"; }
[ "$(steps_of "$run/metrics.jsonl")" = "1 2 3 4" ] || fail "metrics.jsonl steps: $(steps_of "$run/metrics.jsonl")"
[ "$(steps_of "$run/s.jsonl")" = "1 2 3 4" ] || fail "stats.pb steps: $(steps_of "$run/s.jsonl")"
[ "$(grep -oE '^step [0-9]+/4' "$run/train.log" | cut -d' ' -f2 | xargs)" = "1/4 2/4 3/4 4/4" ] ||
  fail "console steps: $(grep -oE '^step [0-9]+/4' "$run/train.log" | xargs)"
grep -qE "last step 4," "$run/table" || fail "momoe-stats' summary does not say last step 4"
grep -qF "last evaluation (step 4)" "$run/table" || fail "momoe-stats' last evaluation is not step 4"
[ "$(grep -c '"eval_sequences":[0-9]*,"step":4' "$run/metrics.jsonl")" -eq 2 ] ||
  fail "metrics.jsonl's evaluations are not at step 4"
expect_file "$run/ckpt-00000004/manifest.pb" "the checkpoint of step 4"
"$bin/momoe-stats" "$run" --follow --poll-seconds 0.1 --max-polls 2 > "$run/follow" || fail "--follow"
[ "$(grep -c '^step ' "$run/follow")" -eq 4 ] || fail "--follow printed $(grep -c '^step ' "$run/follow") steps"
[ "$(grep '^step ' "$run/follow" | cut -d' ' -f2 | xargs)" = "1 2 3 4" ] || fail "--follow's step numbers"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  "$bin/momoe-stats" "$run" --plot "$run/plot.png" > /dev/null || fail "--plot"
  [ -s "$run/plot.png" ] || fail "no PNG written"
  head -c 8 "$run/plot.png" | od -An -c | grep -q "P   N   G" || fail "not a PNG"
fi

MOMOE_PROGRESS_SECONDS=0 "$bin/momoe-eval" --checkpoint "$run/ckpt-00000004" --text "$(dirname "$config")/../../data/brown/test.txt.gz" \
  --max-sequences 16 --attack-rate 0.5 --threads 1 > "$run/eval" 2> "$run/eval.err" || { cat "$run/eval.err"; fail "momoe-eval failed"; }
grep -qE "^momoe-eval: clean: [0-9]+/32 sequences, [0-9]+ tok/s, ETA" "$run/eval.err" &&
  grep -qE "^momoe-eval: attacked: 32/32 sequences" "$run/eval.err" || { cat "$run/eval.err"; fail "no evaluation progress"; }
[ "$(wc -l < "$run/eval")" -eq 1 ] || fail "momoe-eval's stdout is not one JSON line"
cat "$run/eval"
grep -q '"ppl"' "$run/eval" && grep -q '"attacked_ppl"' "$run/eval" && grep -q '"unknown_fraction"' "$run/eval" ||
  fail "momoe-eval output"
# The first 16 sequences, not the whole text: the whole text's words and bytes are named so, and
# the measures per word and per byte (at the whole text's ratios) are named estimates.
for key in '"sequences":16,' '"text_words":' '"text_bytes":' '"word_ppl_estimate":' '"bits_per_byte_estimate":'; do
  grep -qF "$key" "$run/eval" || fail "momoe-eval --max-sequences: no $key"
done
grep -qE '"(words|bytes|word_ppl|bits_per_byte)":' "$run/eval" && fail "momoe-eval --max-sequences gives whole-text figures as the subset's"

# Resume after a checkpoint at step 2 of a 4-step run: steps 3 and 4 are recorded twice in
# stats.pb, and momoe-stats keeps the last record of each.
resume=$run/resume
"$bin/momoe-train" --config "$config" --run-dir "$resume" --set train.steps=4 --set train.checkpoint_every=2 \
  --set train.eval_sequences=8 > /dev/null 2>&1 || fail "resume run 1"
rm -rf "$resume/ckpt-00000004"
"$bin/momoe-train" --config "$config" --run-dir "$resume" --set train.steps=4 --set train.checkpoint_every=2 \
  --set train.eval_sequences=8 > /dev/null 2>&1 || fail "resume run 2"
"$bin/momoe-stats" "$resume" --csv "$run/r.csv" > /dev/null || fail "momoe-stats after resume"
[ "$(wc -l < "$run/r.csv")" -eq 11 ] || fail "duplicate steps after resume: $(wc -l < "$run/r.csv") CSV lines (4 steps x 2 layers + 2 evaluations expected)"

expect_error() {  # expect_error NEEDLE COMMAND...
  local needle=$1; shift
  if "$@" > "$run/err" 2>&1; then fail "'$*' succeeded"; fi
  grep -q -- "$needle" "$run/err" || { cat "$run/err"; fail "'$*' did not mention '$needle'"; }
}
expect_error "missing.pbtxt" "$bin/momoe-train" --config "$run/missing.pbtxt"
expect_error "unknown flag --bogus" "$bin/momoe-train" --config "$config" --bogus 1
expect_error "has no field 'stepz'" "$bin/momoe-train" --config "$config" --set train.stepz=3
expect_error "train.batch_size = 0" "$bin/momoe-train" --config "$config" --set train.batch_size=0 --run-dir "$run/x"
expect_error "needs 2 ranks" "$bin/momoe-train" --config "$config" --ep 2 --run-dir "$run/y"
# The layout is checked before the config's divisibility by it: --ep 3 on one process is about
# the ranks (8 experts do not divide over 3 either, a later question).
expect_error "needs 3 ranks, but this is a single process" "$bin/momoe-train" --config "$config" \
  --ep 3 --run-dir "$run/y"
expect_error "needs train.device = CUDA" "$bin/momoe-train" --config "$config" --set parallel.backend=NCCL --run-dir "$run/z"
if ! nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then
  # Without a GPU, asking for one names why CUDA is unusable (here: no driver).
  expect_error "no CUDA device is usable" "$bin/momoe-train" --config "$config" --set train.device=CUDA --run-dir "$run/z"
  expect_error "needs a GPU on every rank" "$bin/momoe-train" --config "$config" --set train.device=CUDA --set parallel.backend=NCCL --run-dir "$run/z"
fi
expect_error "is a run directory, not a checkpoint: its newest is $run/ckpt-00000004" "$bin/momoe-eval" --checkpoint "$run" --text "$config"
mkdir -p "$run/empty"
expect_error "no checkpoint in" "$bin/momoe-eval" --checkpoint "$run/empty" --text "$config"
# (-h and --help of every command: help_test.sh.)
if [ -x "$bin/../benchmarks/momoe-bench" ]; then
  "$bin/../benchmarks/momoe-bench" layer --help > "$run/help" 2>&1 && grep -q -- "--tokens 2048" "$run/help" ||
    { cat "$run/help"; fail "momoe-bench layer --help"; }
  # Bad input exits 2 with its error alone: nothing on stdout (not even the environment line),
  # a near miss named. An empty thread list, or a negative count, is refused before anything is
  # measured.
  bench_refuses() {  # bench_refuses NEEDLE ARGS...
    local needle=$1; shift
    EXPECT_DIR=$run expect_code 2 "$needle" "$bin/../benchmarks/momoe-bench" "$@"
    [ -s "$run/out" ] && { cat "$run/out"; fail "momoe-bench $* printed on stdout before refusing"; }
    return 0
  }
  bench_refuses "--threads is empty" data --threads ""
  bench_refuses "--threads -1" data --threads 1,-1
  bench_refuses "unknown option --stepz (did you mean --steps?)" train --stepz 3
  bench_refuses "unknown benchmark 'bogus'" bogus
  bench_refuses "unknown benchmark 'trian' (did you mean train?)" trian
  bench_refuses "--preset nonexist is not one of quickstart, smoe-medium, gpu-large, all" train --preset nonexist
  bench_refuses "(did you mean quickstart?)" memory --preset quickstrat
  bench_refuses "FP99" train --precision FP99
  bench_refuses "--dtype f16 is not one of bf16, f32" attention --dtype f16
  bench_refuses "--batch, --heads, --seq, --head-dim and --iterations must be >= 1" attention --seq 0
fi
expect_error "stats file" "$bin/momoe-stats" "$run/nothing"
expect_error "--threads -1 must be in" "$bin/momoe-eval" --checkpoint "$run/ckpt-00000004" --text "$config" --threads -1
# Where --routing-out writes is checked before the evaluation (it is written at the end): a
# missing folder exits 2 at once, naming the path and what to do.
MOMOE_PROGRESS_SECONDS=0 EXPECT_DIR=$run expect_code 2 \
  "--routing-out $run/missing/r.safetensors: the folder $run/missing does not exist: create it first" \
  "$bin/momoe-eval" --checkpoint "$run/ckpt-00000004" --text "$(dirname "$config")/../../data/brown/test.txt.gz" \
  --max-sequences 16 --routing-out "$run/missing/r.safetensors"
grep -q "sequences" "$run/err" && { cat "$run/err"; fail "momoe-eval evaluated before refusing --routing-out"; }
# train.final_eval: one pass, or none.
"$bin/momoe-train" --config "$config" --run-dir "$run/fe1" --set train.steps=2 --set train.eval_sequences=8 \
  --set train.final_eval=SUBSET > "$run/fe1.log" 2>&1 || { cat "$run/fe1.log"; fail "final_eval SUBSET"; }
[ "$(grep -c "^eval at step 2 (" "$run/fe1.log")" -eq 1 ] && grep -q "first 8 sequences" "$run/fe1.log" ||
  { cat "$run/fe1.log"; fail "final_eval SUBSET ran another pass"; }
"$bin/momoe-stats" "$run/fe1" > "$run/fe1.table" || fail "momoe-stats after final_eval SUBSET"
grep -qF "last evaluation (step 2, first 8 sequences of each split)" "$run/fe1.table" &&
  grep -qF "(estimates at the whole split's tokens per word and per byte;" "$run/fe1.table" ||
  { cat "$run/fe1.table"; fail "momoe-stats does not label a subset's per-word measures"; }
"$bin/momoe-train" --config "$config" --run-dir "$run/fe2" --set train.steps=2 --set train.final_eval=NONE \
  > "$run/fe2.log" 2>&1 || { cat "$run/fe2.log"; fail "final_eval NONE"; }
grep -q "^eval at step" "$run/fe2.log" && fail "final_eval NONE evaluated"
grep -q "no final evaluation (train.final_eval = NONE)" "$run/fe2.log" || { cat "$run/fe2.log"; fail "final_eval NONE says nothing"; }
echo PASS
