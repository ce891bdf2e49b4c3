#!/usr/bin/env bash
# A rank killed mid-run (SIGKILL after step 3 via MOMOE_FAULT_*) must end the whole mpirun job
# with a non-zero status within a bounded time, with a message naming the dead rank, and the last
# complete checkpoint (step 2) must stay loadable: a single process resumes from it.
# Usage: killed_rank_test.sh MOMOE_TRAIN CONFIG
set -u
train=$1
config=$2
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
common=(--config "$config" --run-dir "$run" --set train.steps=6 --set train.checkpoint_every=2
        --set train.eval_sequences=8 --set parallel.timeout_seconds=30)
start=$(date +%s)
MOMOE_FAULT_RANK=1 MOMOE_FAULT_STEP=3 timeout 120 mpirun -np 2 --oversubscribe \
  -x MOMOE_FAULT_RANK -x MOMOE_FAULT_STEP "$train" "${common[@]}" --ep 2 > "$run/log" 2>&1
status=$?
elapsed=$(( $(date +%s) - start ))
cat "$run/log"
fail() { echo "FAIL: $*"; exit 1; }
[ "$status" -ne 0 ] || fail "the job exited 0 although rank 1 was killed"
[ "$status" -ne 124 ] || fail "the job hung (killed by timeout after 120 s)"
[ "$elapsed" -le 90 ] || fail "the job took ${elapsed}s to end"
grep -Eiq "rank 1|process rank 1" "$run/log" || fail "no message names rank 1"
[ -f "$run/ckpt-00000002/manifest.pb" ] || fail "the step-2 checkpoint is missing"
[ ! -d "$run/ckpt-00000004" ] || [ -f "$run/ckpt-00000004/manifest.pb" ] || fail "a half checkpoint looks whole"
# The checkpoint loads (EP 2 shards resharded onto one process) and training continues.
"$train" "${common[@]}" --set train.steps=3 > "$run/resume.log" 2>&1 || { cat "$run/resume.log"; fail "resume failed"; }
grep -q "resumed from $run/ckpt-00000002" "$run/resume.log" || { cat "$run/resume.log"; fail "did not resume from step 2"; }
echo "PASS: job ended in ${elapsed}s with status $status; resumed from step 2"
