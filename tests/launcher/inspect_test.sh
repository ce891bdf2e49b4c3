#!/usr/bin/env bash
# What momoe-train shows before a run starts:
#   --print-config prints the resolved config (defaults filled in, --set applied) and writes
#   nothing; printing the printed config gives the same text, and a 2-step run from the printed
#   config has the same losses as one from the original with its --set overrides; its progress
#   lines show the FLOP/s achieved;
#   --dry-run checks everything, builds the model and prints the start-up summary (total and
#   active parameters, training FLOPs per token, the memory estimate), then exits 0 without creating, taking or changing the run directory and
#   without leaving a temporary token cache behind; a run that cannot fit in memory or a layout
#   the ranks cannot make is refused with exit 2, leaving no run directory either.
# Usage: inspect_test.sh BIN_DIR QUICKSTART_CONFIG
set -u
bin=$1
quickstart=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1 MOMOE_PROGRESS_SECONDS=0
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_code, expect_in, expect_no_file
EXPECT_DIR=$work/expect
mkdir "$EXPECT_DIR" "$work/cwd"
cd "$work/cwd" || fail "cannot enter $work/cwd"

# --print-config: the overrides applied, the defaults written out, nothing created.
sets=(--set train.steps=2 --set train.final_eval=NONE --set train.log_every=1
      --set data.cache_dir="$work/cache")
"$bin/momoe-train" --config "$quickstart" "${sets[@]}" --print-config > "$work/a.pbtxt" 2> "$work/a.err" ||
  { cat "$work/a.err"; fail "--print-config failed"; }
[ -s "$work/a.err" ] && { cat "$work/a.err"; fail "--print-config wrote on stderr"; }
expect_in "$work/a.pbtxt" "  steps: 2"           # an override
expect_in "$work/a.pbtxt" "    kind: MOE"        # the arch string as explicit blocks
expect_in "$work/a.pbtxt" "  attention_dropout: 0"  # a default the quick start does not set
[ -z "$(ls -A)" ] || { ls -la; fail "--print-config wrote into the working directory"; }
expect_no_file "$work/cache" "--print-config must not load the data"
# Printed again from the printed text: the same text.
"$bin/momoe-train" --config "$work/a.pbtxt" --print-config > "$work/b.pbtxt" ||
  fail "--print-config of the printed config failed"
cmp "$work/a.pbtxt" "$work/b.pbtxt" || { diff "$work/a.pbtxt" "$work/b.pbtxt"; fail "printing the printed config changed it"; }
# The printed config trains the same run.
"$bin/momoe-train" --config "$quickstart" "${sets[@]}" --run-dir "$work/r1" > "$work/r1.log" 2>&1 ||
  { cat "$work/r1.log"; fail "training from the quick-start config failed"; }
"$bin/momoe-train" --config "$work/a.pbtxt" --run-dir "$work/r2" > "$work/r2.log" 2>&1 ||
  { cat "$work/r2.log"; fail "training from the printed config failed"; }
grep -o '"loss":[^,]*' "$work/r1/metrics.jsonl" > "$work/r1.losses"
grep -o '"loss":[^,]*' "$work/r2/metrics.jsonl" > "$work/r2.losses"
[ "$(wc -l < "$work/r1.losses")" -eq 2 ] || { cat "$work/r1/metrics.jsonl"; fail "expected 2 step losses"; }
# Each progress line shows the model FLOP/s achieved (no MFU on the CPU).
[ "$(grep -cE '^step [12]/2 .* tok/s \| [0-9.]+ [kMGT]?FLOP/s \| ETA' "$work/r1.log")" -eq 2 ] ||
  { cat "$work/r1.log"; fail "the progress lines show no FLOP/s"; }
cmp "$work/r1.losses" "$work/r2.losses" ||
  { paste "$work/r1.losses" "$work/r2.losses"; fail "the printed config trains another run"; }

# --dry-run: everything checked and summarised, nothing written (its token cache is temporary).
export TMPDIR=$work/tmp
mkdir "$TMPDIR"
expect_code 0 "momoe: dry run: " "$bin/momoe-train" --config "$quickstart" --dry-run
# The quick start's sizes (tests/core/model_size_test.cc checks the counting itself).
for needle in "momoe: memory per rank (estimated): " "training sequences of 64 tokens" \
    "would be runs/quickstart)" "momoe: model: 3.56M parameters (every expert of every rank" \
    "2.97M active per token" "10.4 MFLOP per token to train"; do
  expect_in "$EXPECT_DIR/out" "$needle"
done
grep -q "^step " "$EXPECT_DIR/out" && { cat "$EXPECT_DIR/out"; fail "--dry-run trained"; }
[ -z "$(ls -A)" ] || { ls -laR; fail "--dry-run wrote into the working directory"; }
[ -z "$(ls -A "$TMPDIR")" ] || { ls -la "$TMPDIR"; fail "--dry-run left its temporary token cache"; }
expect_code 0 "momoe: dry run: " "$bin/momoe-train" --config "$quickstart" --dry-run --run-dir "$work/new"
expect_no_file "$work/new" "--dry-run must not create the run directory"
# An existing run directory is left exactly as it was (no lock taken, nothing resumed or written).
listing() { find "$1" -printf '%p %s %T@\n' | sort; }
listing "$work/r1" > "$work/r1.before"
expect_code 0 "which exists: a run there resumes" "$bin/momoe-train" --config "$work/a.pbtxt" \
  --run-dir "$work/r1" --dry-run
listing "$work/r1" > "$work/r1.after"
cmp -s "$work/r1.before" "$work/r1.after" ||
  { diff "$work/r1.before" "$work/r1.after"; fail "--dry-run changed an existing run directory"; }
# Refused: a run that cannot fit in memory, a layout the ranks cannot make; nothing left behind.
expect_code 2 "this run needs about" "$bin/momoe-train" --config "$quickstart" --dry-run \
  --set train.batch_size=10000000 --run-dir "$work/huge"
expect_no_file "$work/huge" "a refused dry run must leave no run directory"
expect_code 2 "needs 2 ranks" "$bin/momoe-train" --config "$quickstart" --dry-run --ep 2 \
  --run-dir "$work/ep2"
expect_no_file "$work/ep2" "a refused dry run must leave no run directory"
expect_code 2 "exclude each other" "$bin/momoe-train" --config "$quickstart" --dry-run --print-config
[ -z "$(ls -A "$TMPDIR")" ] || { ls -la "$TMPDIR"; fail "a refused dry run left its temporary token cache"; }
echo PASS
