#!/usr/bin/env bash
# Runs a multi-rank momoe job inside the momoe image on this node: one rank per GPU by default
# (momoe-launch binds each rank to a GPU by its local rank), the run directory mounted from the
# host so statistics and checkpoints survive the container.
#
#   docker/run_multi_rank.sh [-n RANKS] [-e EP] [-i IMAGE] [-r RUN_DIR] [-m DIR]... -- CONFIG [flags]
#   docker/run_multi_rank.sh -n 8 -e 8 -- configs/momentum.pbtxt --set train.steps=2000
#   docker/run_multi_rank.sh -m /data/corpus -- my.pbtxt      (my.pbtxt names files in /data/corpus)
# The config's directory and every -m DIR are mounted read-only at the same paths inside, so the
# paths a config names (a corpus of your own) work unchanged.
set -euo pipefail
ranks=1
if command -v nvidia-smi > /dev/null; then
  gpus_seen=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ' || true)
  [ "${gpus_seen:-0}" -ge 1 ] && ranks=$gpus_seen
fi
mounts=()
ep=""
image=momoe
run_dir=$(pwd)/runs
while [ $# -gt 0 ]; do
  case "$1" in
    -n) ranks=$2; shift 2 ;;
    -e) ep=$2; shift 2 ;;
    -i) image=$2; shift 2 ;;
    -r) run_dir=$2; shift 2 ;;
    -m) mounts+=(-v "$(cd "$2" && pwd):$(cd "$2" && pwd):ro"); shift 2 ;;
    --) shift; break ;;
    *) echo "unknown option $1 (see the header of $0)"; exit 2 ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [-n RANKS] [-e EP] [-i IMAGE] [-r RUN_DIR] [-m DIR]... -- CONFIG [flags]"; exit 2; }
[ -f "$1" ] || { echo "$0: no config file $1"; exit 2; }
config_dir=$(cd "$(dirname "$1")" && pwd)
config=$config_dir/$(basename "$1"); shift
mkdir -p "$run_dir"
name=$(basename "$config" .pbtxt)
gpus=()
command -v nvidia-smi > /dev/null && gpus=(--gpus all)
exec docker run --rm "${gpus[@]}" --ipc=host --shm-size=8g \
  -v "$config_dir:$config_dir:ro" "${mounts[@]}" -v "$run_dir:/workspace/runs" \
  -e NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
  "$image" momoe-launch -np "$ranks" -- momoe-train --config "$config" \
  --run-dir "/workspace/runs/$name" ${ep:+--ep "$ep"} "$@"
