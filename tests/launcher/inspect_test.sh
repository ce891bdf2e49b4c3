#!/usr/bin/env bash
# What momoe-train shows before a run starts:
#   --print-config prints the resolved config (defaults filled in, --set applied) and writes
#   nothing; printing the printed config gives the same text, and a 2-step run from the printed
#   config has the same losses as one from the original with its --set overrides.
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
cmp "$work/r1.losses" "$work/r2.losses" ||
  { paste "$work/r1.losses" "$work/r2.losses"; fail "the printed config trains another run"; }
echo PASS
