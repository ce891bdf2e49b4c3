#!/usr/bin/env bash
# shellcheck disable=SC2154  # ns, hostname, ip and work: set by tests/testing/namespace_hosts.sh
# A job across two hosts, made on this machine: two network namespaces joined by a veth pair
# (10.77.0.1 and 10.77.0.2), each with its own UTS namespace and host name. mpirun runs inside
# host a and starts host b's daemon without ssh: Open MPI's plm_rsh_agent is a script that runs
# "AGENT HOST COMMAND..." inside HOST's namespaces (nsenter). TCP is confined to the veth. The
# hosts share this file system, as a cluster's hosts share a network file system.
#
# EP 2 x DP 2 with two slots per host: ranks 0, 1 on host a and 2, 3 on host b. An EP group is
# two consecutive ranks (comm/process_groups.h), so expert parallelism stays inside a host and
# data parallelism crosses hosts (DP groups {0, 2} and {1, 3}). Checked:
#   - each rank's host and node-local rank, and the memory check counting two pools of two ranks
#     (momoe-train's "placement" and "memory check" lines, core/train/placement.h);
#   - the losses in metrics.jsonl equal those of the same 4-rank job on one host, bit for bit:
#     the reductions' order is the same by design. momoe's collectives are MPI's non-blocking
#     ones (comm/mpi_communicator.cc), whose algorithm Open MPI's libnbc picks from the number
#     of ranks, the message's bytes, the op and whether it is in place, never from where the
#     ranks run; the same Open MPI, ranks and sizes give the same order of additions, whether
#     the bytes travel over TCP between hosts or shared memory;
#   - checkpoints written once per job: every checkpoint holds the same files as the one-host
#     run's, its tensors byte-identical, and no other directory appears;
#   - every rank of host b killed (SIGKILL) after a checkpoint: the job ends within
#     parallel.timeout_seconds plus the diagnosis of the missing ranks (20 s here), the newest
#     checkpoint is intact (its tensors equal the one-host run's of that step; resuming verifies
#     every file's checksum), and the run resumes on one host (4 ranks, host a) to the end with
#     the one-host run's losses, bit for bit.
# Creating namespaces needs root (CI runs as root); without it, or without ip, unshare or nsenter,
# the test fails naming what is missing: it is never skipped. Everything it creates carries this
# shell's pid in its name and is removed on exit, on failure too; what a run killed with SIGKILL
# left (its pid no longer running this test) is removed by the next run.
# Usage: multihost_test.sh MOMOE_TRAIN CONFIG
set -u
train=$1
config=$2
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_file
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
started=$(date +%s)
# shellcheck source=../testing/namespace_hosts.sh
source "$(dirname "$0")/../testing/namespace_hosts.sh"  # make_hosts, write_agent, host_mpirun

timeout_s=10
steps=16
# Every run: the same training (EP 2 on 4 ranks); checkpoints every 4 steps, all kept.
common=(--config "$config" --set "train.steps=$steps" --set train.batch_size=32
        --set train.checkpoint_every=4 --set train.keep_checkpoints=100
        --set train.final_eval=NONE --set parallel.threads=1 --set data.cache_dir="$work/cache"
        --set "parallel.timeout_seconds=$timeout_s")
# mpi HOSTFILE RUN_DIR [FLAGS...]: the job from host a over HOSTFILE's hosts (mpirun options
# from mpirun_opts, --ep from $ep, default 2); output in RUN_DIR.log. Bounded by 240 s (exit 124:
# hung).
mpirun_opts=()
mpi() {
  local hosts=$1 dir=$2
  shift 2
  host_mpirun_timeout=240 host_mpirun "$hosts" 4 "${mpirun_opts[@]}" "$train" --ep "${ep:-2}" \
    "${common[@]}" --run-dir "$dir" "$@" > "$dir.log" 2>&1
}

# losses RUN_DIR: "STEP LOSS" per training step of metrics.jsonl, the last record of each step
# (a resumed run's records supersede the killed attempt's), the loss as Python's repr (exact).
losses() {
  python3 -c '
import json, sys
last = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "loss" in r and "step" in r:
        last[r["step"]] = r["loss"]
for step in sorted(last):
    print(step, repr(last[step]))
' "$1/metrics.jsonl"
}

# same_checkpoint DIR REF: DIR holds exactly REF's files, each byte-identical but the manifest
# (which names its run).
same_checkpoint() {
  local f
  [ "$(ls "$1")" = "$(ls "$2")" ] || { ls "$1" "$2"; fail "$1 holds other files than $2"; }
  for f in "$2"/*; do
    [ "${f##*/}" = manifest.pb ] || cmp -s "$f" "$1/${f##*/}" ||
      fail "$1/${f##*/} differs from the one-host run's"
  done
}

make_hosts
write_agent

# 1. The reference: the job on one host (4 ranks on host a).
one=$work/one_host_run
mpi "$work/one_host" "$one" || { cat "$one.log"; fail "the one-host job failed"; }
expect_in "$one.log" "memory check: host ${hostname[a]} (ranks 0, 1, 2, 3): 4 x"

# 2. Across the two hosts.
two=$work/two_host_run
mpi "$work/two_hosts" "$two" || { cat "$two.log"; fail "the two-host job failed"; }
cat "$two.log"
expect_in "$two.log" "4 rank(s), ep 2 x dp 2 (mpi)"
expect_in "$two.log" "momoe: placement: host ${hostname[a]}: rank 0 (node-local 0, the CPU), rank 1 (node-local 1, the CPU); host ${hostname[b]}: rank 2 (node-local 0, the CPU), rank 3 (node-local 1, the CPU)"
expect_in "$two.log" "memory check: host ${hostname[a]} (ranks 0, 1): 2 x"
expect_in "$two.log" "; host ${hostname[b]} (ranks 2, 3): 2 x"
losses "$one" > "$work/one.losses"
losses "$two" > "$work/two.losses"
[ "$(wc -l < "$work/one.losses")" -eq "$steps" ] || fail "the one-host run logged no loss for some steps"
diff "$work/one.losses" "$work/two.losses" > "$work/losses.diff" ||
  { cat "$work/losses.diff"; fail "the two-host losses differ from the one-host losses"; }
[ "$(cd "$two" && ls -d ckpt-*)" = "$(cd "$one" && ls -d ckpt-*)" ] ||
  { ls "$one" "$two"; fail "the two-host run's checkpoints are not the one-host run's"; }
written=()
for c in "$one"/ckpt-*; do
  written+=("${c##*/}")
  same_checkpoint "$two/${c##*/}" "$c"
  [ "$(grep -c "momoe: checkpoint $two/${c##*/}\$" "$two.log")" -eq 1 ] ||
    fail "${c##*/} was not written once"
done
[ -z "$(find "$two" -mindepth 1 -maxdepth 1 -regextype egrep \
  ! -regex '.*/(cache|ckpt-[0-9]+|lock|metrics\.jsonl|stats\.pb|events\.out\.tfevents\..*)')" ] ||
  { ls "$two"; fail "the two-host run directory holds more than one job's files"; }

# 2b. Ranks round-robin over the hosts (--map-by node: 0, 2 on a; 1, 3 on b) with
# parallel.placement=HOSTS: the EP groups are still made inside a host ({0, 2} and {1, 3}) and
# the training is the same; then EP 4 over both hosts with the staged (hierarchical) exchange,
# against EP 4 flat on one host. Checkpoints off: only the losses are compared.
short=(--set train.steps=4 --set train.checkpoint_every=0 --set train.checkpoint_minutes=0)
placed=$work/placed_run
mpirun_opts=(--map-by node)
mpi "$work/two_hosts" "$placed" "${short[@]}" --set parallel.placement=HOSTS ||
  { cat "$placed.log"; fail "the round-robin job placed by host failed"; }
expect_in "$placed.log" "momoe: layout: placement HOSTS: EP 2 x DP 2 on 2 host(s) (${hostname[a]}: 2, ${hostname[b]}: 2); EP groups (world ranks) [0 2] [1 3], each inside one host"
mpirun_opts=()
losses "$placed" > "$work/placed.losses"
head -4 "$work/one.losses" | diff - "$work/placed.losses" > "$work/losses.diff" ||
  { cat "$work/losses.diff"; fail "placed by host, the round-robin job's losses differ"; }
flat4=$work/flat_ep4_run
staged=$work/staged_ep4_run
ep=4 mpi "$work/one_host" "$flat4" "${short[@]}" ||
  { cat "$flat4.log"; fail "the flat EP 4 job on one host failed"; }
ep=4 mpi "$work/two_hosts" "$staged" "${short[@]}" --set parallel.hierarchical_all_to_all=true ||
  { cat "$staged.log"; fail "the EP 4 job with the staged exchange across hosts failed"; }
losses "$flat4" > "$work/flat4.losses"
losses "$staged" > "$work/staged.losses"
diff "$work/flat4.losses" "$work/staged.losses" > "$work/losses.diff" ||
  { cat "$work/losses.diff"; fail "the staged exchange across hosts changed the EP 4 losses"; }

# 3. Every rank of host b killed after the checkpoint of step 4; the job must end.
killed=$work/killed_run
mpi "$work/two_hosts" "$killed" &
job=$!
for _ in $(seq 2400); do
  [ -d "$killed/ckpt-00000004" ] && break
  kill -0 "$job" 2> /dev/null || { cat "$killed.log"; fail "the job ended before ckpt-00000004"; }
  sleep 0.05
done
[ -d "$killed/ckpt-00000004" ] || { cat "$killed.log"; fail "no ckpt-00000004 after 120 s"; }
ranks_b=()
for pid in $(ip netns pids "${ns[b]}"); do
  [ "$(cat "/proc/$pid/comm" 2> /dev/null)" = momoe-train ] && ranks_b+=("$pid")
done
[ "${#ranks_b[@]}" -eq 2 ] || fail "host b runs ${#ranks_b[@]} momoe-train process(es), expected 2"
kill -9 "${ranks_b[@]}"
killed_at=$(date +%s%N)
wait "$job"
status=$?
ended_ms=$((($(date +%s%N) - killed_at) / 1000000))
cat "$killed.log"
[ "$status" -ne 124 ] || fail "the job hung after host b's ranks were killed (killed by timeout after 240 s)"
[ "$status" -ne 0 ] || fail "the job exited 0 although host b's ranks were killed"
# The bound: momoe's own detection, a collective timeout plus the diagnosis that names the missing
# ranks (min(10 s, timeout), comm/mpi_communicator.h), then MPI_Abort. Both are clocks, which a
# loaded machine does not stretch (killed_rank_test.sh doubles it because it counts start-up and
# steps too). mpirun, told by host b's daemon that its ranks died, ends the job first: about 4 s.
bound=$((timeout_s + (timeout_s < 10 ? timeout_s : 10)))
[ "$ended_ms" -le $((bound * 1000)) ] ||
  fail "the job took ${ended_ms} ms after the kill to end (bound ${bound} s)"
newest=
for c in "$killed"/ckpt-*; do  # in name order: the newest last
  [[ "$c" =~ /ckpt-[0-9]+$ ]] && newest=$c
done
[ -n "$newest" ] || fail "no complete checkpoint after the kill"
ckpt_step=$((10#${newest##*ckpt-}))
[ "$ckpt_step" -lt "$steps" ] || fail "the run reached its end ($newest) before the kill"
same_checkpoint "$newest" "$one/${newest##*/}"

# 4. The same run resumed on one host (4 ranks on host a) from that checkpoint to the end.
mpi "$work/one_host" "$killed" || { cat "$killed.log"; fail "the resume on one host failed"; }
expect_in "$killed.log" "resumed from $newest at step $ckpt_step"
losses "$killed" > "$work/resumed.losses"
diff "$work/one.losses" "$work/resumed.losses" > "$work/losses.diff" ||
  { cat "$work/losses.diff"; fail "the resumed run's losses differ from the uninterrupted run's"; }
same_checkpoint "$killed/ckpt-$(printf %08d "$steps")" "$one/ckpt-$(printf %08d "$steps")"

echo "== multihost summary"
echo "hosts: ${hostname[a]} (${ip[a]}) and ${hostname[b]} (${ip[b]}): network and UTS namespaces" \
  "joined by a veth pair; mpirun on host a, host b's daemon through nsenter (plm_rsh_agent)"
echo "layout: EP 2 x DP 2; host a: ranks 0, 1 (node-local 0, 1), host b: ranks 2, 3" \
  "(node-local 0, 1); EP groups {0, 1} {2, 3} inside a host, DP {0, 2} {1, 3} across;" \
  "memory check: 2 pools of 2 ranks"
echo "losses: $steps steps, two hosts = one host bit for bit (step 1 $(sed -n 1p "$work/two.losses" |
  cut -d' ' -f2), step $steps $(tail -1 "$work/two.losses" | cut -d' ' -f2)); checkpoints" \
  "${written[*]} written once, tensors = one host's"
echo "placement HOSTS under --map-by node (ranks 0, 2 on a; 1, 3 on b): EP groups in a host," \
  "losses = one host's bit for bit; EP 4 over both hosts with the staged exchange: losses = EP 4" \
  "flat on one host, bit for bit"
echo "killed host b (2 ranks, SIGKILL) after ckpt-00000004: job ended ${ended_ms} ms after the kill" \
  "(exit $status; bound ${bound}s, parallel.timeout_seconds $timeout_s); newest checkpoint" \
  "${newest##*/} intact; resumed on one host (4 ranks) from step $ckpt_step to $steps," \
  "losses = uninterrupted bit for bit"
echo "PASS in $(($(date +%s) - started))s"
