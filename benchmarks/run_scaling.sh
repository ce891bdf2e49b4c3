#!/usr/bin/env bash
# Weak and strong scaling of the MoE layer and of a training step over 1..N CPU ranks (EP = ranks),
# as JSON lines plus a plot. Meant for a many-core machine (e.g. the 16-core GPU host with CPU
# ranks); each rank runs single-threaded BLAS.
#   benchmarks/run_scaling.sh [BUILD_DIR] [MAX_RANKS] [OUT_PREFIX]
set -euo pipefail
build=${1:-build}
max=${2:-16}
out=${3:-scaling}
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: > "$out.jsonl"
for np in 1 2 4 8 16; do
  [ "$np" -le "$max" ] || break
  for what in layer train; do
    for mode in weak strong; do
      # One core per rank when there are enough; beyond that the points measure oversubscription.
      bind=core
      [ "$np" -le "$(nproc)" ] || bind=none
      mpirun -np "$np" --oversubscribe --bind-to "$bind" "$build/benchmarks/momoe-bench" scaling \
        --what "$what" --mode "$mode" | grep '"scaling"' | tee -a "$out.jsonl"
    done
  done
done
/usr/bin/python3 "$(dirname "$0")/plot_scaling.py" "$out.jsonl" "$out.png" && echo "wrote $out.png"
