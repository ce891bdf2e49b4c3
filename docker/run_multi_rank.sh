#!/usr/bin/env bash
# Runs a multi-rank momoe job inside the momoe image on this node: one rank per GPU by default
# (momoe-launch binds each rank to a GPU by its local rank), the run directory mounted from the
# host so statistics and checkpoints survive the container.
#
#   docker/run_multi_rank.sh [-n RANKS] [-e EP] [-i IMAGE] [-r RUN_DIR] -- CONFIG [momoe-train flags]
#   docker/run_multi_rank.sh -n 8 -e 8 -- configs/momentum.pbtxt --set train.steps=2000
set -euo pipefail
ranks=$(nvidia-smi -L 2>/dev/null | wc -l || echo 1)
[ "$ranks" -ge 1 ] || ranks=1
ep=""
image=momoe
run_dir=$(pwd)/runs
while [ $# -gt 0 ]; do
  case "$1" in
    -n) ranks=$2; shift 2 ;;
    -e) ep=$2; shift 2 ;;
    -i) image=$2; shift 2 ;;
    -r) run_dir=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "unknown option $1 (see the header of $0)"; exit 2 ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [-n RANKS] [-e EP] [-i IMAGE] [-r RUN_DIR] -- CONFIG [flags]"; exit 2; }
config=$1; shift
mkdir -p "$run_dir"
name=$(basename "$config" .pbtxt)
gpus=()
command -v nvidia-smi > /dev/null && gpus=(--gpus all)
exec docker run --rm "${gpus[@]}" --ipc=host --shm-size=8g \
  -v "$(pwd)/configs:/workspace/configs:ro" -v "$run_dir:/workspace/runs" \
  -e NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
  "$image" momoe-launch -np "$ranks" -- momoe-train --config "/workspace/configs/$(basename "$config")" \
  --run-dir "/workspace/runs/$name" ${ep:+--ep "$ep"} "$@"
