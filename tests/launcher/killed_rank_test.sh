#!/usr/bin/env bash
# A rank killed mid-run (SIGKILL after step 3 via MOMOE_FAULT_*) must end the whole mpirun job
# with a non-zero status within a bounded time, with momoe's own message naming the dead rank, and
# the last complete checkpoint (step 2) must stay loadable: a single process resumes from it.
# Usage: killed_rank_test.sh MOMOE_TRAIN CONFIG
set -u
train=$1
config=$2
run=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$run"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
timeout_s=30
common=(--config "$config" --run-dir "$run" --set train.steps=6 --set train.checkpoint_every=2
        --set train.eval_sequences=8 --set "parallel.timeout_seconds=$timeout_s")
# The bound, from the configured timeouts: with or without mpirun's help, the survivors stop no
# later than momoe's own detection, a collective timeout plus the diagnosis that names the missing
# rank (min(10 s, timeout), comm/mpi_communicator.h), then MPI_Abort. Twice that, counted from
# the kill, is the bound: load slows the ranks' start and steps, not the clock.
bound=$(( 2 * (timeout_s + (timeout_s < 10 ? timeout_s : 10)) ))
killed_line="fault injection: killing this rank after step 3 (MOMOE_FAULT_STEP)"
MOMOE_FAULT_RANK=1 MOMOE_FAULT_STEP=3 timeout 240 mpirun -np 2 --oversubscribe \
  -x MOMOE_FAULT_RANK -x MOMOE_FAULT_STEP "$train" "${common[@]}" --ep 2 > "$run/log" 2>&1 &
pid=$!
# The clock starts when rank 1 says it is being killed (at most 180 s for start-up and 3 steps).
killed_at=
for _ in $(seq 1800); do
  grep -qF -- "$killed_line" "$run/log" && { killed_at=$(date +%s); break; }
  kill -0 "$pid" 2> /dev/null || break
  sleep 0.1
done
wait "$pid"
status=$?
ended_at=$(date +%s)
cat "$run/log"
[ "$status" -ne 124 ] || fail "the job hung (killed by timeout after 240 s)"
[ "$status" -ne 0 ] || fail "the job exited 0 although rank 1 was killed"
# momoe's own line, from rank 1 (log prefix "[momoe r1 "), names the rank that died and when;
# mpirun's notice ("process rank 1 ... exited on signal 9") is Open MPI's and is not relied on.
grep -F -- "$killed_line" "$run/log" | grep -q "^\[momoe r1 " ||
  fail "no momoe message names rank 1 as the killed rank"
[ -n "$killed_at" ] || fail "the kill was never logged (is MOMOE_FAULT_STEP honoured?)"
elapsed=$((ended_at - killed_at))
[ "$elapsed" -le "$bound" ] || fail "the job took ${elapsed}s after the kill to end (bound ${bound}s)"
[ -f "$run/ckpt-00000002/manifest.pb" ] || fail "the step-2 checkpoint is missing"
[ ! -d "$run/ckpt-00000004" ] || [ -f "$run/ckpt-00000004/manifest.pb" ] || fail "a half checkpoint looks whole"
# The checkpoint loads (EP 2 shards resharded onto one process) and training continues.
"$train" "${common[@]}" --set train.steps=3 > "$run/resume.log" 2>&1 || { cat "$run/resume.log"; fail "resume failed"; }
grep -q "resumed from $run/ckpt-00000002" "$run/resume.log" || { cat "$run/resume.log"; fail "did not resume from step 2"; }
echo "PASS: job ended ${elapsed}s after the kill (bound ${bound}s) with status $status; resumed from step 2"
