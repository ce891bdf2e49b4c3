#!/usr/bin/env bash
# momoe-launch: the mpirun and srun lines it builds (dry run), and a real 2-rank job through it.
# Usage: launch_test.sh BIN_DIR CONFIG
set -u
bin=$1
config=$2
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
export OPENBLAS_NUM_THREADS=1 NCCL_DEBUG=WARN
out=$("$bin/momoe-launch" -np 16 --hostfile hosts --ranks-per-node 8 --launcher mpirun --dry-run -- momoe-train --config c.pbtxt --ep 8)
echo "$out"
for want in "mpirun -np 16 --bind-to none --hostfile hosts --map-by ppr:8:node" "-x NCCL_DEBUG" \
            "-x OPENBLAS_NUM_THREADS" "--rank-exec -- momoe-train --config c.pbtxt --ep 8"; do
  [[ "$out" == *"$want"* ]] || fail "mpirun line lacks '$want'"
done
out=$(SLURM_JOB_ID=1 "$bin/momoe-launch" -np 4 --ranks-per-node 2 --dry-run -- momoe-train --config c.pbtxt)
echo "$out"
[[ "$out" == *"srun --ntasks 4 --export=ALL --kill-on-bad-exit=1 --ntasks-per-node 2"* ]] || fail "srun line"
"$bin/momoe-launch" -np 2 > /dev/null 2>&1 && fail "a missing command must be an error"
"$bin/momoe-launch" --bogus -- true > /dev/null 2>&1 && fail "an unknown flag must be an error"
# A real job: two ranks, EP 2.
"$bin/momoe-launch" -np 2 -- "$bin/momoe-train" --config "$config" --run-dir "$run" --ep 2 \
  --set train.steps=2 --set train.eval_sequences=8 > "$run/log" 2>&1 || { cat "$run/log"; fail "2-rank job failed"; }
grep -q "2 rank(s), ep 2 x dp 1" "$run/log" || { cat "$run/log"; fail "not a 2-rank EP job"; }
echo PASS
