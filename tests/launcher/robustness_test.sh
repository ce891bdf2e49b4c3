#!/usr/bin/env bash
# A run never loses work: the executables as a user, a scheduler and a crash treat them.
# Usage: robustness_test.sh BIN_DIR CONFIG CASE
# Cases (one CTest entry each): signal, signal_mpi, stuck_rank_mpi, lock, fresh, damaged,
# config_change, torn_stats, memory, inputs, inputs_mpi, rollback, rollback_loop, periodic.
# The cases assert behaviour: exit codes, the files of a run directory, the step numbers that a run
# records (RUN_DIR/metrics.jsonl, momoe-stats --json); an error's output is only checked for the
# thing it must name (a path, a flag, a config key).
set -u
bin=$1
config=$2
case=$3
run=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$run"' EXIT
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cache="$run/cache"
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
export FAIL_CONTEXT=$case  # "FAIL [case]: ..."
# The final evaluation of the helpers' runs covers the tracked subset only (8 sequences): over the
# whole splits it would cost seconds per run and check nothing here (a case may set it again).
quick_eval=(--set train.eval_sequences=8 --set train.final_eval=SUBSET)
# train RUN_DIR [FLAGS...]: the tiny model with a shared token cache; output in RUN_DIR.log.
train() {
  local dir=$1; shift
  "$bin/momoe-train" --config "$config" --run-dir "$dir" "${quick_eval[@]}" \
    --set data.cache_dir="$cache" "$@" > "$dir.log" 2>&1
}
# start RUN_DIR [FLAGS...]: train in the background; $pid is momoe-train's own pid (not a subshell's).
start() {
  local dir=$1; shift
  "$bin/momoe-train" --config "$config" --run-dir "$dir" "${quick_eval[@]}" \
    --set data.cache_dir="$cache" "$@" > "$dir.log" 2>&1 &
  pid=$!
}
# Waits until FILE contains NEEDLE (at most 60 s) while process $pid lives.
wait_for() {
  for _ in $(seq 600); do
    grep -qF -- "$2" "$1" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$1"; fail "the process ended before '$2' appeared in $1"; }
    sleep 0.1
  done
  cat "$1"; fail "timed out waiting for '$2' in $1"
}
# Waits until PATH exists (at most 60 s) while process $pid lives.
wait_for_file() {
  for _ in $(seq 600); do
    [ -e "$1" ] && return 0
    kill -0 "$pid" 2>/dev/null || fail "the process ended before $1 appeared"
    sleep 0.1
  done
  fail "timed out waiting for $1"
}
long=(--set train.steps=1000000 --set train.log_every=200)
# The complete checkpoints of a run directory (not the .tmp/.trash/.aside of a save in flight).
complete_checkpoints() {
  local d
  for d in "$1"/ckpt-*; do  # in name order, as ls lists them
    [[ "$d" =~ /ckpt-[0-9]+$ ]] && [ -d "$d" ] && echo "$d"
  done
  return 0
}
# step_of CKPT_DIR: the steps done of a checkpoint directory .../ckpt-NNNNNNNN.
step_of() { echo $((10#${1##*ckpt-})); }
# records FILE KIND [FROM]: the step of each KIND record of a JSON-lines FILE (RUN_DIR/metrics.jsonl,
# one line per logged step, evaluation and marker, appended by every run; or what momoe-stats
# --json writes) from its line FROM on (default 1), one a line. Every record's step counts the
# steps done (a training step's record says N after its N-th step). KIND: train (a training step),
# skipped (a training step skipped as non-finite), eval, rollback (the checkpoint rolled back to
# with --resume-from), interrupted (the checkpoint a run killed after it resumed from).
records() {
  tail -n "+${3:-1}" "$1" | python3 -c '
import json, sys
kind = sys.argv[1]
for line in sys.stdin:
    r = json.loads(line)
    if kind in ("rollback", "interrupted"):
        if "rollback_to" in r and r.get("interrupted", False) == (kind == "interrupted"):
            print(r["rollback_to"])
    elif kind == "eval":
        if "eval_sequences" in r: print(r["step"])
    elif "loss" in r and (kind == "train" or r["skipped"]):
        print(r["step"])
' "$2"
}
# next_line RUN_DIR: the line of RUN_DIR/metrics.jsonl that the next run's records start at.
next_line() { echo $(($(cat "$1/metrics.jsonl" 2>/dev/null | wc -l) + 1)); }
# expect_resumed RUN_DIR STEP FROM: the run that appended to RUN_DIR/metrics.jsonl from line FROM on
# (its log in RUN_DIR.log) resumed from the checkpoint of step STEP: its first training step is
# STEP + 1.
expect_resumed() {
  local first
  first=$(records "$1/metrics.jsonl" train "$3" | sed -n 1p)
  [ "$first" = $(($2 + 1)) ] ||
    { cat "$1.log"; fail "$1: the run's first step is '$first', expected $(($2 + 1)) (resumed from ckpt-$2)"; }
}
# stats_json RUN_DIR|FILE OUT: momoe-stats writes the records it reads as JSON lines to OUT (its
# output in OUT.txt); it must succeed.
stats_json() {
  "$bin/momoe-stats" "$1" --json "$2" > "$2.txt" 2>&1 || { cat "$2.txt"; fail "momoe-stats $1 failed"; }
}

case $case in
signal)
  # Each stop signal: the step in flight finishes, a checkpoint is written, statistics are
  # flushed, exit code 3; the same command resumes from that step.
  for sig in INT TERM HUP USR1; do
    dir=$run/$sig
    start "$dir" "${long[@]}"
    wait_for "$dir.log" "step 200/"
    kill -"$sig" "$pid"
    wait "$pid"; rc=$?
    [ "$rc" -eq 3 ] || { cat "$dir.log"; fail "SIG$sig: exit code $rc, expected 3"; }
    expect_in "$dir.log" "SIG$sig"  # the log names the signal
    # The checkpoint of the step the signal came in (step 200 or later), and the statistics of
    # every step before it.
    ckpt=$(complete_checkpoints "$dir" | tail -1)
    [ -f "$ckpt/manifest.pb" ] || { cat "$dir.log"; ls "$dir"; fail "SIG$sig: no checkpoint"; }
    step=$(step_of "$ckpt")
    [ "$step" -ge 200 ] || { cat "$dir.log"; fail "SIG$sig: no checkpoint after step 200: newest $ckpt"; }
    stats_json "$dir" "$dir.stats.jsonl"
    last=$(records "$dir.stats.jsonl" train | tail -1)
    [ "$last" = "$step" ] ||
      fail "SIG$sig: the statistics end at step '$last', expected $step (${ckpt##*/})"
    from=$(next_line "$dir")
    train "$dir" --set train.steps=$((step + 2)) || { cat "$dir.log"; fail "SIG$sig: resume failed"; }
    expect_resumed "$dir" "$step" "$from"
  done
  # A stop during the final evaluation (over the whole splits: long) ends it at once: the
  # checkpoint is already saved; exit code 3. "At once" against a baseline measured here: the same
  # run left alone, from its checkpoint line to its exit (the whole final evaluation). Stopping
  # must take less than half of that (a stop before the first batch counts: the evaluation may be
  # short on a fast CPU).
  final=(--config "$config" --set data.cache_dir="$cache" --set train.steps=2 --set train.eval_sequences=0)
  dir=$run/final_eval_whole
  "$bin/momoe-train" "${final[@]}" --run-dir "$dir" > "$dir.log" 2>&1 &
  pid=$!
  wait_for_file "$dir/ckpt-00000002/manifest.pb"
  t0=$(date +%s%N)
  wait "$pid" || { cat "$dir.log"; fail "the final evaluation left alone failed"; }
  whole_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$(records "$dir/metrics.jsonl" eval)" = 2 ] ||
    { cat "$dir.log"; fail "the final evaluation left alone recorded no evaluation of step 2"; }
  dir=$run/final_eval
  "$bin/momoe-train" "${final[@]}" --run-dir "$dir" > "$dir.log" 2>&1 &
  pid=$!
  wait_for_file "$dir/ckpt-00000002/manifest.pb"
  t0=$(date +%s%N)
  kill -TERM "$pid"
  wait "$pid"; rc=$?
  stop_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$rc" -eq 3 ] || { cat "$dir.log"; fail "SIGTERM in the final evaluation: exit $rc, expected 3"; }
  [ "$stop_ms" -lt $((whole_ms / 2)) ] ||
    fail "the final evaluation went on after SIGTERM: ${stop_ms} ms to stop, ${whole_ms} ms for all of it"
  expect_file "$dir/ckpt-00000002/manifest.pb" "the checkpoint of step 2, kept"
  [ -z "$(records "$dir/metrics.jsonl" eval)" ] ||
    { cat "$dir.log"; fail "the final evaluation finished after SIGTERM"; }
  # Rerunning the finished run repeats no evaluation that stats.pb holds already (metrics.jsonl
  # would get it twice): it says so, and the one record stays one.
  dir=$run/final_eval_whole
  "$bin/momoe-train" "${final[@]}" --run-dir "$dir" > "$dir.rerun.log" 2>&1 ||
    { cat "$dir.rerun.log"; fail "the rerun of a finished run failed"; }
  expect_in "$dir.rerun.log" "is recorded in stats.pb already: not repeated"
  [ "$(records "$dir/metrics.jsonl" eval)" = 2 ] ||
    { cat "$dir.rerun.log"; fail "the rerun of a finished run repeated its final evaluation"; }
  # A second signal stops at once, without a checkpoint.
  dir=$run/twice
  start "$dir" "${long[@]}"
  wait_for "$dir.log" "step 200/"
  kill -TERM "$pid"
  wait_for "$dir.log" "SIGTERM"  # received (a signal sent while one is pending is merged into it)
  kill -TERM "$pid"
  wait "$pid"; rc=$?
  [ "$rc" -eq 143 ] || { cat "$dir.log"; fail "a second SIGTERM: exit status $rc, expected 143"; }
  ;;
signal_mpi)
  # Under mpirun every rank stops after the same step: SIGUSR1 to mpirun (which forwards it to
  # every rank), SIGTERM to one rank only, and Ctrl-C (SIGINT) or SIGTERM (a scheduler's stop)
  # to momoe-launch. (SIGTERM to a bare mpirun: Open MPI's mpirun then exits 1 itself, whatever
  # the ranks return; README, "A run never loses work".)
  for how in usr1_mpirun term_one_rank int_launch term_launch; do
    dir=$run/$how
    if [ "$how" = int_launch ] || [ "$how" = term_launch ]; then
      "$bin/momoe-launch" -np 2 -- "$bin/momoe-train" --config "$config" --run-dir "$dir" --ep 2 \
        --set data.cache_dir="$cache" --set train.eval_sequences=8 "${long[@]}" > "$dir.log" 2>&1 &
    else
      mpirun -np 2 --oversubscribe "$bin/momoe-train" --config "$config" --run-dir "$dir" --ep 2 \
        --set data.cache_dir="$cache" --set train.eval_sequences=8 "${long[@]}" > "$dir.log" 2>&1 &
    fi
    pid=$!
    wait_for "$dir.log" "step 200/"
    case $how in
      usr1_mpirun) kill -USR1 "$pid" ;;
      term_one_rank) kill -TERM "$(pgrep -f -- "--run-dir $dir" | grep -v "^$pid\$" | sort -n | tail -1)" ;;
      int_launch) kill -INT "$pid" ;;
      term_launch) kill -TERM "$pid" ;;
    esac
    wait "$pid"; rc=$?
    # Every rank stops after the same step with exit code 3, and mpirun (or momoe-launch over
    # it) passes that code on: 0 would mean no rank saw the stop.
    [ "$rc" -eq 3 ] || { cat "$dir.log"; fail "$how: exit status $rc, expected 3"; }
    ckpt=$(complete_checkpoints "$dir" | tail -1)
    [ -f "$ckpt/manifest.pb" ] || { cat "$dir.log"; ls "$dir"; fail "$how: no checkpoint"; }
    step=$(step_of "$ckpt")
    [ "$step" -ge 200 ] || { cat "$dir.log"; fail "$how: no checkpoint after step 200: newest $ckpt"; }
    [ -f "$ckpt/experts-ep1-of-2.safetensors" ] || fail "$how: rank 1's expert shard is missing"
    from=$(next_line "$dir")
    train "$dir" --set train.steps=$((step + 1)) || { cat "$dir.log"; fail "$how: resume failed"; }
    expect_resumed "$dir" "$step" "$from"
  done
  ;;
inputs_mpi)
  # Bad input found under mpirun gets exit code 2 too (not MPI_Abort's 1), naming the problem.
  expect_mpi() {  # expect_mpi NP NEEDLE ARGS...: NEEDLE, what the error must name
    local np=$1 needle=$2; shift 2
    mpirun -np "$np" --oversubscribe "$bin/momoe-train" --config "$config" --run-dir "$run/mpi_in" \
      --set data.cache_dir="$cache" "$@" > "$run/err" 2>&1
    local rc=$?
    [ "$rc" -eq 2 ] || { cat "$run/err"; fail "mpirun -np $np $*: exit $rc, expected 2"; }
    grep -qF -- "$needle" "$run/err" || { cat "$run/err"; fail "mpirun -np $np $*: no '$needle'"; }
  }
  # A config or flag error that every rank finds before the world exists is printed once, by
  # rank 0; each rank's own line, at debug level, carries its own rank (not r0 on every rank).
  expect_mpi 2 "did you mean train.steps?" --set train.step=1
  [ "$(grep -c "no field 'step'" "$run/err")" -eq 1 ] || { cat "$run/err"; fail "a config error printed by more than one rank"; }
  expect_in "$run/err" "[momoe r0 E"
  expect_mpi 2 "did you mean --run-dir?" --run-dirr x
  [ "$(grep -c "unknown flag" "$run/err")" -eq 1 ] || { cat "$run/err"; fail "a flag error printed by more than one rank"; }
  expect_mpi 2 "[momoe r1 D" --set train.step=1 --log-level debug
  expect_in "$run/err" "[momoe r0 E"
  expect_mpi 3 "train.batch_size"  # 8 is not divisible by 3 ranks
  # Found alike by every rank after the world exists (a config check against the world size, a
  # layout check): printed once, by rank 0.
  [ "$(grep -c "train.batch_size" "$run/err")" -eq 1 ] || { cat "$run/err"; fail "a job-wide error printed by more than one rank"; }
  expect_mpi 3 "world size 3 is not divisible by --ep 2" --ep 2
  [ "$(grep -c "is not divisible by --ep" "$run/err")" -eq 1 ] || { cat "$run/err"; fail "a layout error printed by more than one rank"; }
  expect_in "$run/err" "[momoe r0 E"
  expect_no_file "$run/mpi_in" "the run directory created by a refused run"
  # Each rank checks its own copy of the data; the ranks agree on one verdict (comm/agree.h).
  expect_mpi 2 "every rank: model.vocab_size = 7 does not match" --set model.vocab_size=7
  [ "$(grep -c "does not match" "$run/err")" -eq 1 ] || { cat "$run/err"; fail "an agreed data error printed by more than one rank"; }
  expect_no_file "$run/mpi_in" "the run directory of a run refused after reading its data"
  expect_mpi 2 "--ep 4" --ep 4  # larger than the world size
  # Ranks started with different configs (mpirun's MPMD form).
  one=("$bin/momoe-train" --config "$config" --run-dir "$run/mpi_in" --set data.cache_dir="$cache")
  mpirun --oversubscribe -np 1 "${one[@]}" --set train.seed=1 : -np 1 "${one[@]}" --set train.seed=2 \
    > "$run/err" 2>&1
  rc=$?
  [ "$rc" -eq 2 ] || { cat "$run/err"; fail "configs that differ between ranks: exit $rc, expected 2"; }
  [ "$(grep -c "run a different configuration" "$run/err")" -eq 1 ] || { cat "$run/err"; fail "the configs' verdict printed by more than one rank"; }
  ;;
stuck_rank_mpi)
  # A rank that stops responding (not dead) is detected within the training timeout, and the
  # message names it. The bound, from the configured timeout: the stall is found one timeout after
  # it, plus the diagnosis that names the missing rank (min(10 s, timeout),
  # comm/mpi_communicator.h), then MPI_Abort ends the job. Twice that, counted from the stall, is
  # the bound (20 s; the default 30 s timeout would take 40 s).
  dir=$run/stuck
  timeout_s=5
  bound=$(( 2 * (timeout_s + (timeout_s < 10 ? timeout_s : 10)) ))
  MOMOE_FAULT_RANK=1 MOMOE_FAULT_STEP=3 MOMOE_FAULT_STALL=1 timeout 120 mpirun -np 2 --oversubscribe \
    -x MOMOE_FAULT_RANK -x MOMOE_FAULT_STEP -x MOMOE_FAULT_STALL "$bin/momoe-train" --config "$config" \
    --run-dir "$dir" --ep 2 --set data.cache_dir="$cache" --set train.steps=20 \
    --set parallel.timeout_seconds=$timeout_s > "$dir.log" 2>&1 &
  pid=$!
  wait_for "$dir.log" "MOMOE_FAULT_STALL"  # the fault injection stalls rank 1 after step 3
  stalled_at=$(date +%s)
  wait "$pid"; rc=$?
  elapsed=$(( $(date +%s) - stalled_at ))
  cat "$dir.log"
  [ "$rc" -ne 0 ] || fail "the job exited 0 with a stuck rank"
  [ "$rc" -ne 124 ] || fail "the job hung until the outer timeout"
  [ "$elapsed" -le "$bound" ] || fail "the job took ${elapsed}s after the stall to end (bound ${bound}s, timeout ${timeout_s}s)"
  expect_in "$dir.log" "rank(s) 1 "  # the stuck rank, named
  ;;
lock)
  # One job per run directory: a second trainer is refused naming the first; a lock left by a
  # killed job is recognised as stale and taken over.
  dir=$run/locked
  start "$dir" "${long[@]}"
  wait_for "$dir.log" "step 200/"
  holder="momoe-train pid $pid on host $(hostname),"
  expect_in "$dir/lock" "$holder"
  "$bin/momoe-train" --config "$config" --run-dir "$dir" --set data.cache_dir="$cache" > "$run/second.log" 2>&1
  rc=$?
  [ "$rc" -eq 2 ] || { cat "$run/second.log"; fail "a second trainer on the directory: exit $rc, expected 2"; }
  expect_in "$run/second.log" "pid $pid "  # the refusal names the holder
  kill -0 "$pid" || fail "the first trainer ended when the second was refused"
  expect_in "$dir/lock" "$holder"
  kill -KILL "$pid"; wait "$pid" 2>/dev/null
  expect_in "$dir/lock" "$holder"  # a killed job leaves its line: a stale lock
  train "$dir" --set train.steps=2 --fresh || { cat "$dir.log"; fail "after a killed job"; }
  expect_file "$dir/ckpt-00000002/manifest.pb" "the run after the killed one"
  [ ! -s "$dir/lock" ] || { cat "$dir/lock"; fail "the lock still names a holder after a clean exit"; }
  ;;
fresh)
  # --fresh never mixes runs: the old run's checkpoints and statistics (stats.pb, metrics.jsonl,
  # the TensorBoard event file) move to archive/.
  dir=$run/fresh
  train "$dir" --set train.steps=4 --set train.checkpoint_every=2 --set train.keep_checkpoints=5 || fail "run A"
  train "$dir" --set train.steps=2 --set train.checkpoint_every=2 --set train.seed=5 --fresh || fail "run B"
  [ "$(ls -d "$dir"/archive/* | wc -l)" -eq 1 ] || { ls -R "$dir"; fail "expected one archive of run A"; }
  archived=$(ls -d "$dir"/archive/*)
  for f in ckpt-00000004/manifest.pb ckpt-00000002/manifest.pb stats.pb metrics.jsonl; do
    expect_file "$archived/$f" "run A's, archived"
  done
  [ "$(compgen -G "$archived/events.out.tfevents.*" | wc -l)" -eq 1 ] ||
    { ls "$archived"; fail "run A's TensorBoard event file is not archived"; }
  [ "$(compgen -G "$dir/events.out.tfevents.*" | wc -l)" -eq 1 ] ||
    { ls "$dir"; fail "run A's TensorBoard event file mixed into run B's"; }
  [ "$(ls -d "$dir"/ckpt-* | wc -l)" -eq 1 ] || { ls "$dir"; fail "run A's checkpoints mixed into run B's"; }
  [ "$(records "$dir/metrics.jsonl" train | xargs)" = "1 2" ] ||
    { cat "$dir/metrics.jsonl"; fail "run A's metrics mixed into run B's"; }
  from=$(next_line "$dir")
  train "$dir" --set train.steps=3 --set train.checkpoint_every=2 --set train.seed=5 || fail "resume B"
  expect_resumed "$dir" 2 "$from"
  stats_json "$dir" "$run/stats.jsonl"
  [ "$(records "$run/stats.jsonl" train | xargs)" = "1 2 3" ] ||
    { cat "$run/stats.jsonl.txt"; fail "run B's statistics are not steps 1 to 3 (run A's mixed in?)"; }
  ;;
damaged)
  # A damaged newest checkpoint is reported, never passed over silently; an explicit flag
  # resumes from the older one; nothing is deleted.
  dir=$run/damaged
  train "$dir" --set train.steps=4 --set train.checkpoint_every=2 --set train.keep_checkpoints=1 || fail "run"
  [ -d "$dir/ckpt-00000002" ] && fail "pruning kept ckpt-2 with keep_checkpoints=1"
  train "$dir" --set train.steps=6 --set train.checkpoint_every=2 --set train.keep_checkpoints=2 || fail "run 2"
  printf '\x01' | dd of="$dir/ckpt-00000006/manifest.pb" bs=1 seek=30 conv=notrunc 2>/dev/null
  cp -r "$dir" "$run/damaged.copy"
  train "$dir" --set train.steps=8 --set train.checkpoint_every=2 --set train.keep_checkpoints=2
  rc=$?
  [ "$rc" -eq 1 ] || { cat "$dir.log"; fail "resuming over a damaged manifest: exit $rc, expected 1"; }
  expect_in "$dir.log" "$dir/ckpt-00000006"  # names the damaged checkpoint
  expect_in "$dir.log" "--resume-from $dir/ckpt-00000004"  # and what to do
  for c in ckpt-00000004 ckpt-00000006; do
    diff -r "$run/damaged.copy/$c" "$dir/$c" || fail "the refused resume changed $dir/$c"
  done
  expect_no_file "$dir/ckpt-00000008" "the refused resume trained"
  "$bin/momoe-eval" --checkpoint "$dir/ckpt-00000006" --text "$config" > "$run/eval.log" 2>&1
  rc=$?
  [ "$rc" -eq 1 ] || { cat "$run/eval.log"; fail "momoe-eval on a damaged manifest: exit $rc, expected 1"; }
  expect_in "$run/eval.log" "$dir/ckpt-00000006/manifest.pb"  # names the damaged file
  from=$(next_line "$dir")
  train "$dir" --set train.steps=8 --set train.checkpoint_every=2 --set train.keep_checkpoints=2 \
    --resume-from "$dir/ckpt-00000004" || { cat "$dir.log"; fail "--resume-from"; }
  expect_resumed "$dir" 4 "$from"
  # Resuming from an older checkpoint is a rollback (recorded in the statistics): the damaged
  # newer one is kept, archived.
  [ "$(records "$dir/metrics.jsonl" rollback "$from")" = 4 ] ||
    { cat "$dir/metrics.jsonl"; fail "no rollback to step 4 recorded"; }
  [ -f "$(ls -d "$dir"/abandoned/*-after-ckpt-00000004 | head -1)/ckpt-00000006/manifest.pb" ] ||
    { ls -R "$dir"; fail "the damaged checkpoint was deleted"; }
  # One flipped byte in a tensor file (the manifest intact), found after the error's advice was
  # followed: the damaged checkpoint is kept as it was, never replaced by the re-save of its step.
  dir=$run/damaged_data
  train "$dir" --set train.steps=4 --set train.checkpoint_every=2 --set train.keep_checkpoints=2 || fail "run 3"
  printf '\x01' | dd of="$dir/ckpt-00000004/dense.safetensors" bs=1 seek=300 conv=notrunc 2>/dev/null
  cp -r "$dir" "$run/damaged_data.copy"
  train "$dir" --set train.steps=6 --set train.checkpoint_every=2 --set train.keep_checkpoints=2
  rc=$?
  [ "$rc" -eq 1 ] || { cat "$dir.log"; fail "resuming over a damaged tensor file: exit $rc, expected 1"; }
  expect_in "$dir.log" "dense.safetensors"  # names the damaged file
  for c in ckpt-00000002 ckpt-00000004; do
    diff -r "$run/damaged_data.copy/$c" "$dir/$c" || fail "the refused resume changed $dir/$c"
  done
  expect_no_file "$dir/ckpt-00000006" "the refused resume trained"
  train "$dir" --set train.steps=4 --set train.checkpoint_every=2 --set train.keep_checkpoints=2 \
    --resume-from "$dir/ckpt-00000002" || { cat "$dir.log"; fail "--resume-from past a damaged tensor file"; }
  kept=$(ls -d "$dir"/abandoned/*-after-ckpt-00000002 | head -1)/ckpt-00000004
  cmp -s <(printf '\x01') <(dd if="$kept/dense.safetensors" bs=1 skip=300 count=1 2>/dev/null) ||
    { ls -R "$dir"; fail "the damaged ckpt-4 was not kept as it was"; }
  [ -f "$dir/ckpt-00000004/manifest.pb" ] || fail "step 4 was not saved again"
  ;;
rollback)
  # Rolling back never loses the live lineage: resuming from ckpt-20 of a 40-step run moves the
  # abandoned ckpt-40 to abandoned/, pruning (keep 1) spares the resume source until the new
  # branch has a newer checkpoint, a kill mid-branch and the same command again continue the
  # branch, and the branch ends with the weights of an uninterrupted run.
  dir=$run/rb
  ref=$run/rb_ref
  steps=(--set train.steps=40 --set train.log_every=1 --set train.eval_every=0)
  train "$ref" "${steps[@]}" --set train.checkpoint_every=40 || { cat "$ref.log"; fail "reference run"; }
  train "$dir" "${steps[@]}" --set train.checkpoint_every=20 || { cat "$dir.log"; fail "run"; }
  again=("${steps[@]}" --set train.checkpoint_every=5 --set train.keep_checkpoints=1
         --resume-from "$dir/ckpt-00000020")
  # Killed after step 34 by the fault injection (SIGKILL after the step, before any save of it):
  # a kill timed from the log could land in step 35's save, whose commit the next start-up
  # completes, so that the newest checkpoint would depend on the machine's speed.
  from=$(next_line "$dir")
  MOMOE_FAULT_RANK=0 MOMOE_FAULT_STEP=34 start "$dir" "${again[@]}"
  wait "$pid" 2>/dev/null; rc=$?
  [ "$rc" -eq 137 ] || { cat "$dir.log"; fail "the fault injection's SIGKILL: exit status $rc, expected 137"; }
  [ "$(records "$dir/metrics.jsonl" rollback "$from")" = 20 ] ||
    { cat "$dir/metrics.jsonl"; fail "no rollback to step 20 recorded"; }
  printed=$(records "$dir/metrics.jsonl" train "$from" | tail -1)
  [ "$printed" = 34 ] || { cat "$dir.log"; fail "the branch's last step is '$printed', not step 34"; }
  [ -f "$(ls -d "$dir"/abandoned/*-after-ckpt-00000020 | head -1)/ckpt-00000040/manifest.pb" ] ||
    { ls -R "$dir"; fail "the abandoned ckpt-40 was not kept"; }
  newest=$(complete_checkpoints "$dir" | tail -1)
  [[ "$newest" > "$dir/ckpt-00000029" ]] || { ls "$dir"; fail "the branch's checkpoints were lost: newest $newest"; }
  # The statistics show the live branch: the last step is the branch's (the last one it logged),
  # not the abandoned branch's 40.
  stats_json "$dir" "$run/rb.stats.jsonl"
  last=$(records "$run/rb.stats.jsonl" train | tail -1)
  [ -n "$last" ] && [ "$last" -le "$printed" ] ||
    { cat "$run/rb.stats.jsonl.txt"; fail "momoe-stats shows the abandoned branch (last step '$last', the branch logged $printed)"; }
  # keep_checkpoints=1 (a kill between a save's commit and its pruning may leave one more).
  [ "$(complete_checkpoints "$dir" | wc -l)" -le 2 ] || { ls "$dir"; fail "keep_checkpoints=1 kept more"; }
  # The same command again continues the branch from its newest checkpoint: no second rollback.
  from=$(next_line "$dir")
  train "$dir" "${again[@]}" || { cat "$dir.log"; fail "the same command again"; }
  expect_resumed "$dir" "$(step_of "$newest")" "$from"
  [ -z "$(records "$dir/metrics.jsonl" rollback "$from")" ] ||
    { cat "$dir.log"; fail "the same command rolled back to ckpt-00000020 again"; }
  [ "$(ls -d "$dir"/abandoned/* | wc -l)" -eq 1 ] || { ls -R "$dir"; fail "a second branch was abandoned"; }
  for f in dense experts-ep0-of-1 optimizer-dense; do
    cmp -s "$dir/ckpt-00000040/$f.safetensors" "$ref/ckpt-00000040/$f.safetensors" ||
      fail "the rolled-back branch's $f differs from an uninterrupted run's"
  done
  # Without --resume-from the live branch continues too (the abandoned one is out of sight).
  from=$(next_line "$dir")
  train "$dir" --set train.steps=42 --set train.checkpoint_every=5 --set train.keep_checkpoints=1 ||
    { cat "$dir.log"; fail "plain resume"; }
  expect_resumed "$dir" 40 "$from"
  ;;
rollback_loop)
  # Randomized: roll back to a random checkpoint, kill at a random moment, again and again (at
  # least 20 times); no checkpoint of the live lineage is ever lost, and finishing the run gives
  # an uninterrupted run's weights.
  dir=$run/loop
  ref=$run/loop_ref
  opts=(--set train.steps=30 --set train.log_every=1 --set train.eval_every=0
        --set train.checkpoint_every=3)
  train "$ref" "${opts[@]}" --set train.keep_checkpoints=1 || { cat "$ref.log"; fail "reference run"; }
  train "$dir" "${opts[@]}" --set train.steps=12 --set train.keep_checkpoints=4 || fail "first run"
  # A fixed seed, so that a failure replays (the kill moments still vary with the machine's speed);
  # MOMOE_TEST_SEED picks another sequence.
  seed=${MOMOE_TEST_SEED:-38}
  RANDOM=$seed
  echo "rollback_loop: RANDOM seeded with $seed (set MOMOE_TEST_SEED to try another)"
  for i in $(seq "${MOMOE_ROLLBACK_ITERATIONS:-20}"); do
    mapfile -t ckpts < <(complete_checkpoints "$dir")
    [ ${#ckpts[@]} -gt 0 ] || { ls -R "$dir"; fail "iteration $i: no checkpoint left"; }
    target=${ckpts[$((RANDOM % ${#ckpts[@]}))]}
    keep=$((1 + RANDOM % 3))
    start "$dir" "${opts[@]}" --set train.keep_checkpoints=$keep --resume-from "$target"
    sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
    kill -KILL "$pid" 2> /dev/null; wait "$pid" 2> /dev/null
    # The live lineage: the checkpoint resumed from, or newer ones of its branch.
    tstep=${target##*ckpt-}
    on_lineage() { [ -n "$1" ] && { [ "${1##*ckpt-}" \> "$tstep" ] || [ "${1##*ckpt-}" = "$tstep" ]; }; }
    newest=$(complete_checkpoints "$dir" | tail -1)
    if ! on_lineage "$newest"; then
      # Killed inside a commit (ckpt-N.tmp complete, the old ckpt-N renamed to .trash): the
      # start-up recovery finishes it (core/checkpoint/checkpoint_io.h). A start refused for its
      # vocabulary size runs just that: it takes the lock and recovers before it reads the data.
      "$bin/momoe-train" --config "$config" --run-dir "$dir" --set data.cache_dir="$cache" \
        --set model.vocab_size=7 > "$run/recover.log" 2>&1
      rc=$?
      [ "$rc" -eq 2 ] || { cat "$run/recover.log"; fail "iteration $i: the recovery start exited $rc, expected 2"; }
      newest=$(complete_checkpoints "$dir" | tail -1)
      echo "iteration $i: killed inside a commit; the recovery start left ${newest##*/}"
    fi
    on_lineage "$newest" ||
      { cat "$dir.log" "$run/recover.log" 2>/dev/null; ls -R "$dir"; fail "iteration $i: resumed from $target, newest now '$newest' (after any recovery)"; }
    echo "iteration $i: --resume-from ${target##*/} (keep $keep), killed; newest ${newest##*/}"
  done
  train "$dir" "${opts[@]}" --set train.keep_checkpoints=2 || { cat "$dir.log"; fail "finishing"; }
  for f in dense experts-ep0-of-1 optimizer-dense optimizer-experts-ep0-of-1; do
    cmp -s "$dir/ckpt-00000030/$f.safetensors" "$ref/ckpt-00000030/$f.safetensors" ||
      fail "after the rollbacks and kills, $f differs from an uninterrupted run's"
  done
  ;;
config_change)
  # Resuming lists every changed field; changes to what training computes are refused unless
  # allowed; a longer run is fine.
  dir=$run/changed
  train "$dir" --set train.steps=2 || fail "run"
  before=$(ls "$dir")
  train "$dir" --set train.steps=3 --set model.moe.top_k=1 --set train.optimizer.lr=0.01
  rc=$?
  [ "$rc" -eq 2 ] || { cat "$dir.log"; fail "a changed top_k: exit $rc, expected 2"; }
  # The refused start leaves the run directory as it was (no new event file, nothing else).
  [ "$(ls "$dir")" = "$before" ] ||
    fail "the refused start changed the run directory: $(diff <(echo "$before") <(ls "$dir"))"
  # Every changed field is named, and the flag that allows the change.
  for key in "model.moe.top_k: 2 -> 1" "train.optimizer.lr" "--allow-config-change"; do
    expect_in "$dir.log" "$key"
  done
  expect_no_file "$dir/ckpt-00000003" "the refused resume trained"
  from=$(next_line "$dir")
  train "$dir" --set train.steps=3 || { cat "$dir.log"; fail "a longer run"; }
  expect_resumed "$dir" 2 "$from"
  expect_in "$dir.log" "train.steps"  # listed, not refused
  from=$(next_line "$dir")
  train "$dir" --set train.steps=4 --set model.moe.top_k=1 --allow-config-change || { cat "$dir.log"; fail "allowed"; }
  expect_resumed "$dir" 3 "$from"
  # Under a COSINE schedule a longer run changes the learning rate of the steps already
  # planned: refused unless allowed.
  dir=$run/cosine
  cos=(--set train.schedule.kind=COSINE --set train.schedule.warmup_steps=1)
  train "$dir" "${cos[@]}" --set train.steps=4 || fail "cosine run"
  train "$dir" "${cos[@]}" --set train.steps=8
  rc=$?
  [ "$rc" -eq 2 ] || { cat "$dir.log"; fail "extending a COSINE run: exit $rc, expected 2"; }
  expect_in "$dir.log" "train.steps"
  expect_no_file "$dir/ckpt-00000008" "the refused resume trained"
  train "$dir" "${cos[@]}" --set train.steps=8 --allow-config-change || { cat "$dir.log"; fail "allowed cosine"; }
  expect_file "$dir/ckpt-00000008" "the allowed longer COSINE run"
  # The same corpus paths with other contents: a changed validation split is listed only; the
  # training split's lines shuffled is refused (its content fingerprint is in every manifest).
  corp=$run/corpus
  mkdir -p "$corp"
  data=$(dirname "$config")/../../data/brown
  zcat "$data/train.txt.gz" | head -3000 > "$corp/train.txt"
  zcat "$data/valid.txt.gz" | head -300 > "$corp/valid.txt"
  cp "$corp/valid.txt" "$corp/test.txt"
  files=(--set data.train="$corp/train.txt" --set data.valid="$corp/valid.txt"
         --set data.test="$corp/test.txt")
  dir=$run/contents
  train "$dir" "${files[@]}" --set train.steps=2 || { cat "$dir.log"; fail "run on the small corpus"; }
  head -150 "$corp/valid.txt" > "$corp/valid.half" && mv "$corp/valid.half" "$corp/valid.txt"
  from=$(next_line "$dir")
  train "$dir" "${files[@]}" --set train.steps=3 ||
    { cat "$dir.log"; fail "a changed validation split was refused (it is run control)"; }
  expect_resumed "$dir" 2 "$from"
  expect_in "$dir.log" "data.valid"  # listed
  shuf --random-source=<(yes) "$corp/train.txt" > "$corp/shuffled" && mv "$corp/shuffled" "$corp/train.txt"
  train "$dir" "${files[@]}" --set train.steps=4
  rc=$?
  [ "$rc" -eq 2 ] || { cat "$dir.log"; fail "a shuffled training file: exit $rc, expected 2"; }
  expect_in "$dir.log" "data.train"
  expect_no_file "$dir/ckpt-00000004" "the refused resume trained"
  train "$dir" "${files[@]}" --set train.steps=4 --allow-config-change || { cat "$dir.log"; fail "allowed contents"; }
  # The same training tokens from the corpus's prepared dataset: the paths' change is listed,
  # not refused (the training split's fingerprint is unchanged; docs/data_format.md).
  dir=$run/to_dataset
  train "$dir" "${files[@]}" --set train.steps=2 || { cat "$dir.log"; fail "the run before the dataset"; }
  "$bin/momoe-data" prepare --out "$run/dataset" --train "$corp/train.txt" --valid "$corp/valid.txt" \
    --test "$corp/test.txt" --vocab-max-size 2000 > "$run/dataset.log" 2>&1 ||
    { cat "$run/dataset.log"; fail "momoe-data prepare"; }
  from=$(next_line "$dir")
  train "$dir" --set data.dataset="$run/dataset" --set train.steps=3 ||
    { cat "$dir.log"; fail "resuming on the same tokens from their dataset was refused"; }
  expect_resumed "$dir" 2 "$from"
  expect_in "$dir.log" "the same training tokens"
  ;;
torn_stats)
  # A torn last record of stats.pb (a kill mid-write) is cut away before appending; the reader
  # and --follow survive torn, damaged and truncated files.
  dir=$run/torn
  train "$dir" --set train.steps=3 || fail "run"
  size=$(stat -c %s "$dir/stats.pb")
  truncate -s $((size - 7)) "$dir/stats.pb"  # the last record is the final evaluation's
  stats_json "$dir" "$run/s1.jsonl"
  [ "$(records "$run/s1.jsonl" train | xargs)" = "1 2 3" ] ||
    { cat "$run/s1.jsonl.txt"; fail "momoe-stats lost intact records of a torn file"; }
  train "$dir" --set train.steps=5 || { cat "$dir.log"; fail "resume"; }
  ls "$dir"/stats.pb.torn-* > /dev/null 2>&1 || { ls -R "$dir"; fail "the torn record was not cut (and kept)"; }
  stats_json "$dir" "$run/s2.jsonl"
  [ "$(records "$run/s2.jsonl" train | xargs)" = "1 2 3 4 5" ] ||
    { cat "$run/s2.jsonl.txt"; fail "after the resume, the statistics are not steps 1 to 5"; }
  # --follow prints a line "step N ..." per training step as it is written, and follows a file
  # truncated under it (then replaced: a new run with --fresh) from its start again.
  "$bin/momoe-stats" "$dir" --follow --poll-seconds 0.2 --max-polls 600 > "$run/follow" 2>&1 &
  fpid=$!
  for _ in $(seq 100); do [ "$(grep -c '^step ' "$run/follow")" -ge 5 ] && break; sleep 0.1; done
  : > "$dir/stats.pb"  # truncated under the follower (a new run's file)
  sleep 0.5
  train "$dir" --set train.steps=7 --fresh || fail "fresh run"
  sleep 1  # five polls
  kill -0 "$fpid" 2>/dev/null || { cat "$run/follow"; fail "--follow ended on a truncated file"; }
  { kill "$fpid"; wait "$fpid"; } 2>/dev/null
  followed=$(grep '^step ' "$run/follow" | cut -d' ' -f2 | xargs)
  [ "$followed" = "1 2 3 4 5 1 2 3 4 5 6 7" ] ||
    { cat "$run/follow"; fail "--follow printed steps '$followed', expected the old run's 1-5, then the new run's 1-7"; }
  # One flipped byte in the middle loses one record, not every later one; a resume cuts nothing.
  dir=$run/flipped
  train "$dir" --set train.steps=20 || fail "run 20"
  size=$(stat -c %s "$dir/stats.pb")
  printf '\x5a' | dd of="$dir/stats.pb" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
  stats_json "$dir" "$run/s3.jsonl"
  recorded=$(records "$run/s3.jsonl" train | wc -l)
  [ "$recorded" -ge 19 ] || { cat "$run/s3.jsonl.txt"; fail "a flipped byte lost $((20 - recorded)) step records"; }
  size=$(stat -c %s "$dir/stats.pb")
  cp "$dir/stats.pb" "$run/flipped.pb"
  train "$dir" --set train.steps=22 || { cat "$dir.log"; fail "resume over a damaged record"; }
  cmp -n "$size" "$run/flipped.pb" "$dir/stats.pb" || fail "a resume changed or cut the records before it"
  ls "$dir"/stats.pb.torn-* > /dev/null 2>&1 && { ls "$dir"; fail "a resume cut records"; }
  stats_json "$dir" "$run/s4.jsonl"
  recorded=$(records "$run/s4.jsonl" train | wc -l)
  [ "$recorded" -ge 21 ] || { cat "$run/s4.jsonl.txt"; fail "after the resume only $recorded step records"; }
  # Not a stats file, and a mistyped run directory: exit 2, named.
  echo "not statistics at all, just some text" > "$run/garbage.pb"
  "$bin/momoe-stats" "$run/garbage.pb" > "$run/s5" 2>&1; rc=$?
  [ "$rc" -eq 2 ] || { cat "$run/s5"; fail "momoe-stats on garbage: exit $rc, expected 2"; }
  expect_in "$run/s5" "$run/garbage.pb"
  "$bin/momoe-stats" "$run/no_such_run" --follow --max-polls 2 > "$run/s6" 2>&1; rc=$?
  [ "$rc" -eq 2 ] || { cat "$run/s6"; fail "--follow on a mistyped run directory: exit $rc, expected 2"; }
  expect_in "$run/s6" "$run/no_such_run"
  mkdir -p "$run/not_started"
  "$bin/momoe-stats" "$run/not_started" --follow --poll-seconds 0.1 --max-polls 2 > "$run/s7" 2>&1 ||
    { cat "$run/s7"; fail "--follow on a run directory without stats yet (it waits)"; }
  ;;
memory)
  # An impossible batch is refused before anything is allocated for it: about as fast as a
  # refusal one check earlier (a vocabulary size that does not match, found once the data is
  # loaded). The baseline is timed before and after (the token cache warm) and the refusal may
  # take 10 times the slower.
  refuse() {  # refuse NAME FLAGS...: momoe-train must exit 2; its time in ms in $ms
    local name=$1 t0 rc; shift
    t0=$(date +%s%N)
    "$bin/momoe-train" --config "$config" --run-dir "$run/$name" --set data.cache_dir="$cache" "$@" \
      > "$run/$name.log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ "$rc" -eq 2 ] || { cat "$run/$name.log"; fail "$name: exit $rc, expected 2"; }
  }
  vocab=(--set model.vocab_size=7)
  refuse warm "${vocab[@]}"
  refuse base1 "${vocab[@]}"; before=$ms
  refuse mem --set train.batch_size=10000000; mem=$ms
  refuse base2 "${vocab[@]}"; after=$ms
  expect_in "$run/base1.log" "model.vocab_size"  # the baseline is the refusal meant
  base=$(( before > after ? before : after ))
  [ "$mem" -le $((10 * base)) ] || fail "the refusal took ${mem} ms, the baseline refusal ${base} ms"
  expect_in "$run/mem.log" "train.batch_size"  # names what to lower
  ;;
inputs)
  # Bad input gets exit code 2 and a message naming it (the flag, the value, the path, the key).
  export EXPECT_DIR=$run  # expect_code's out and err
  train "$run/ok" --set train.steps=2 || fail "run"
  ck=$run/ok/ckpt-00000002
  expect_code 2 "--attack-rate" "$bin/momoe-eval" --checkpoint "$ck" --text "$config" --attack-rate -1
  expect_code 2 "--attack-rate" "$bin/momoe-eval" --checkpoint "$ck" --text "$config" --attack-rate nan
  expect_code 2 "--window" "$bin/momoe-stats" "$run/ok" --window 0
  expect_code 2 "4abc" "$bin/momoe-launch" -np 4abc -- true
  expect_code 2 "--ep" "$bin/momoe-train" --config "$config" --ep 0
  # Typos get the closest known names; a bad --set value is blamed on its --set, not the file.
  expect_code 2 "did you mean train.steps?" "$bin/momoe-train" --config "$config" --set train.step=10
  expect_code 2 "did you mean --run-dir?" "$bin/momoe-train" --config "$config" --run-dirr "$run/t"
  expect_code 2 "--set 'train.steps=-5': train.steps" "$bin/momoe-train" --config "$config" --set train.steps=-5
  expect_code 2 "$run" "$bin/momoe-train" --config "$run"
  expect_code 2 "MOMOE_FAULT_RANK" env MOMOE_FAULT_RANK=abc "$bin/momoe-train" --config "$config" --run-dir "$run/f" --set data.cache_dir="$cache"
  expect_code 2 "--resume-from" "$bin/momoe-train" --config "$config" --fresh --resume-from "$ck"
  # A corpus that is not a regular file.
  mkfifo "$run/fifo"
  expect_code 2 "$run/fifo" "$bin/momoe-train" --config "$config" --run-dir "$run/c1" --set data.train="$run/fifo" --set data.valid= --set data.test=
  mkdir "$run/a_dir"
  expect_code 2 "$run/a_dir" "$bin/momoe-train" --config "$config" --run-dir "$run/c1" --set data.valid="$run/a_dir"
  expect_code 2 "/dev/null" "$bin/momoe-train" --config "$config" --run-dir "$run/c1" --set data.test=/dev/null
  # A run refused before training leaves no run directory that it created (its token cache
  # inside included, the new parent too), and leaves one that existed as it was.
  expect_code 2 "model.vocab_size" "$bin/momoe-train" --config "$config" --run-dir "$run/new/refused" --set model.vocab_size=7
  expect_no_file "$run/new" "the run directory (and its parent) created by a refused run"
  mkdir "$run/existing" && echo keep > "$run/existing/mine"
  expect_code 2 "model.vocab_size" "$bin/momoe-train" --config "$config" --run-dir "$run/existing" --set model.vocab_size=7
  expect_file "$run/existing/mine" "a file of a run directory that existed before a refused run"
  # A text file as the dataset, a folder as the text: what to set instead, with momoe-data.
  expect_code 2 "set data.train=$config" "$bin/momoe-train" --config "$config" --run-dir "$run/c1" --set data.dataset="$config"
  expect_in "$run/err" "momoe-data prepare --train $config --out NEW_DIR"
  no_splits=(--set data.valid= --set data.test=)
  expect_code 2 "momoe-data prepare --train $run/a_dir --out NEW_DIR" "$bin/momoe-train" --config "$config" --run-dir "$run/c1" --set data.train="$run/a_dir" "${no_splits[@]}"
  mkdir "$run/prepared" && touch "$run/prepared/index.json"
  expect_code 2 "data.dataset=$run/prepared" "$bin/momoe-train" --config "$config" --run-dir "$run/c1" --set data.train="$run/prepared" "${no_splits[@]}"
  # momoe-eval's JSON line parses whatever the paths hold.
  weird="$run/we\"ird\\dir"
  mkdir -p "$weird" && cp -r "$ck" "$weird/" && cp "$(dirname "$config")/../../data/brown/test.txt.gz" "$weird/t\"x.txt.gz"
  "$bin/momoe-eval" --checkpoint "$weird/ckpt-00000002" --text "$weird/t\"x.txt.gz" --max-sequences 4 > "$run/eval.json" ||
    fail "momoe-eval on quoted paths"
  python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read()); assert d["text"].endswith("t\"x.txt.gz"), d' "$run/eval.json" ||
    { cat "$run/eval.json"; fail "momoe-eval's line does not parse as JSON"; }
  # Non-finite config values are refused by name; a run whose steps keep being skipped as
  # non-finite stops (exit 1) naming the last checkpoint saved before them, instead of going on.
  expect_code 2 "train.optimizer.weight_decay" "$bin/momoe-train" --config "$config" --run-dir "$run/nf" --set train.optimizer.weight_decay=inf
  expect_code 2 "model.moe.capacity_factor" "$bin/momoe-train" --config "$config" --run-dir "$run/nf" --set model.moe.capacity_factor=nan
  expect_code 1 "train.max_skipped_steps" \
    "$bin/momoe-train" --config "$config" --run-dir "$run/diverged" --set data.cache_dir="$cache" \
    --set train.optimizer.lr=1e30 --set train.grad_clip=0 --set train.steps=30 \
    --set train.checkpoint_every=1 --set train.max_skipped_steps=5
  expect_in "$run/err" "--resume-from $run/diverged/ckpt-00000001"  # the last good checkpoint
  # Steps 2 to 6 were skipped, and the run stopped after them.
  [ "$(records "$run/diverged/metrics.jsonl" skipped | xargs)" = "2 3 4 5 6" ] &&
    [ "$(records "$run/diverged/metrics.jsonl" train | tail -1)" = 6 ] ||
    { cat "$run/diverged/metrics.jsonl"; fail "the diverged run did not stop after 5 skipped steps (2 to 6)"; }
  expect_file "$run/diverged/ckpt-00000001/manifest.pb" "the last good checkpoint"
  expect_no_file "$run/diverged/ckpt-00000002" "a checkpoint written while steps were skipped"
  # A short run whose last steps are skipped (every update after the first diverges) ends with
  # exit 1 naming it, not 0, and never prints nan as a perplexity (nor evaluates).
  expect_code 1 "skipped as non-finite at the end of the run" \
    "$bin/momoe-train" --config "$config" --run-dir "$run/diverged3" --set data.cache_dir="$cache" \
    --set train.optimizer.lr=1e300 --set train.steps=3 --set train.eval_sequences=8
  ! cat "$run/out" "$run/err" | grep -iE "ppl -?nan|nan per word|nan bits" ||
    fail "a diverged run printed nan as a perplexity"
  out=$("$bin/momoe-launch" -np 2 --dry-run -- echo 'a b' "it's" 'x;y' plain)
  [[ "$out" == *"echo 'a b' 'it'\\''s' 'x;y' plain" ]] || fail "the printed line is not shell-quoted: $out"
  ;;
periodic)
  # Checkpoints by default: a run with the default settings (train.checkpoint_every 500,
  # train.checkpoint_minutes 10) killed with SIGKILL after step 560 resumes from ckpt-500, loses
  # steps 501-560 only, and ends bit-identical to an uninterrupted run; stats.pb and metrics.jsonl
  # mark the killed attempt's records superseded, so every step is recorded once.
  dir=$run/periodic
  ref=$run/periodic_ref
  steps=(--set train.steps=600 --set train.log_every=1 --set train.final_eval=NONE)
  train "$ref" "${steps[@]}" || { cat "$ref.log"; fail "reference run"; }
  MOMOE_FAULT_RANK=0 MOMOE_FAULT_STEP=560 start "$dir" "${steps[@]}"
  wait "$pid" 2>/dev/null; rc=$?
  [ "$rc" -eq 137 ] || { cat "$dir.log"; fail "the SIGKILL after step 560: exit status $rc, expected 137"; }
  [ "$(complete_checkpoints "$dir" | xargs -n1 basename | xargs)" = ckpt-00000500 ] ||
    { ls "$dir"; fail "a default run killed after step 560 has no ckpt-00000500 (checkpoint_every's default)"; }
  from=$(next_line "$dir")
  train "$dir" "${steps[@]}" || { cat "$dir.log"; fail "the rerun"; }
  expect_resumed "$dir" 500 "$from"
  [ "$(records "$dir/metrics.jsonl" interrupted "$from")" = 500 ] ||
    { cat "$dir/metrics.jsonl"; fail "no marker of the interrupted steps after ckpt-500"; }
  stats_json "$dir" "$run/periodic.jsonl"
  [ "$(records "$run/periodic.jsonl" train | xargs)" = "$(seq 1 600 | xargs)" ] ||
    { records "$run/periodic.jsonl" train | uniq -d | head; fail "momoe-stats does not show steps 1-600 once each"; }
  for f in dense experts-ep0-of-1 optimizer-dense; do
    cmp -s "$dir/ckpt-00000600/$f.safetensors" "$ref/ckpt-00000600/$f.safetensors" ||
      fail "the resumed run's $f differs from an uninterrupted run's"
  done
  # By time alone (checkpoint_every 0): a run killed after step 50 saved before it.
  dir=$run/by_time
  MOMOE_FAULT_RANK=0 MOMOE_FAULT_STEP=50 start "$dir" --set train.steps=60 \
    --set train.checkpoint_every=0 --set train.checkpoint_minutes=0.0001
  wait "$pid" 2>/dev/null; rc=$?
  [ "$rc" -eq 137 ] || { cat "$dir.log"; fail "by time: exit status $rc, expected 137"; }
  newest=$(complete_checkpoints "$dir" | tail -1)
  [ -n "$newest" ] || { cat "$dir.log"; fail "no checkpoint by time (train.checkpoint_minutes) in 50 steps"; }
  from=$(next_line "$dir")
  train "$dir" --set train.steps=60 --set train.checkpoint_every=0 --set train.checkpoint_minutes=0.0001 ||
    { cat "$dir.log"; fail "by time: the rerun"; }
  expect_resumed "$dir" "$(step_of "$newest")" "$from"
  # Killed before its first save: the rerun says it starts over and why, and moves the killed
  # attempt's statistics aside (metrics.jsonl starts again at step 1, unmixed).
  dir=$run/no_checkpoint
  MOMOE_FAULT_RANK=0 MOMOE_FAULT_STEP=20 start "$dir" --set train.steps=30 --set train.log_every=1
  wait "$pid" 2>/dev/null
  expect_file "$dir/metrics.jsonl" "the killed attempt's metrics"
  train "$dir" --set train.steps=30 --set train.log_every=1 || { cat "$dir.log"; fail "no_checkpoint: the rerun"; }
  expect_in "$dir.log" "starts over from step 0"
  expect_file "$(ls -d "$dir"/archive/* | head -1)/metrics.jsonl" "the killed attempt's metrics, archived"
  [ "$(records "$dir/metrics.jsonl" train | xargs)" = "$(seq 1 30 | xargs)" ] ||
    { cat "$dir/metrics.jsonl"; fail "no_checkpoint: metrics.jsonl is not steps 1-30 once each"; }
  ;;
*) fail "unknown case" ;;
esac
echo "PASS [$case]"
