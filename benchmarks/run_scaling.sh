#!/usr/bin/env bash
# Weak and strong scaling of the MoE layer and of a training step over 1..N CPU ranks (EP = ranks),
# the all-to-all measurements the cost model is fitted to, and the model's predictions beside the
# measured points (benchmarks/scaling_model.py, docs/scaling.md), as JSON lines plus a plot. Each
# rank runs single-threaded BLAS; beyond one rank per core the points measure oversubscription
# (the model is told the cores).
#   benchmarks/run_scaling.sh [BUILD_DIR] [MAX_RANKS] [OUT_PREFIX]
# With MOMOE_SCALING_HOSTS=2 (root) the 2- and 4-rank points run across two hosts as well, made on
# this machine as network namespaces (tests/testing/namespace_hosts.sh). Every line carries
# "hosts". Writes OUT_PREFIX.jsonl, OUT_PREFIX.png and OUT_PREFIX_model.txt.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
max=${2:-16}
out=${3:-scaling}
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/benchmarks/momoe-bench
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: > "$out.jsonl"

# tag HOSTS: the benchmark's JSON lines (not its environment line), each with "hosts": HOSTS.
tag() { grep -E '"bench": "(scaling|alltoall)"' | sed "s/^{/{\"hosts\": $1, /" | tee -a "$out.jsonl"; }

# points LAUNCH...: the training and layer points, then the all-to-all sizes, under LAUNCH (which
# ends with the rank count's mpirun arguments).
points() {
  local what mode
  for what in layer train; do
    for mode in weak strong; do
      "$@" "$bench" scaling --what "$what" --mode "$mode"
    done
  done
  if [ "${*: -1}" != 1 ]; then
    "$@" "$bench" alltoall --tokens 256,1024,4096 --d 128 --experts 16 --iterations 10
  fi
}

for np in 1 2 4 8 16; do
  [ "$np" -le "$max" ] || break
  bind=core
  [ "$np" -le "$(nproc)" ] || bind=none
  points mpirun --oversubscribe --bind-to "$bind" -np "$np" | tag 1
done

if [ "${MOMOE_SCALING_HOSTS:-1}" = 2 ]; then
  # shellcheck source=../tests/testing/shell_helpers.sh
  source "$here/../tests/testing/shell_helpers.sh"
  # shellcheck source=../tests/testing/namespace_hosts.sh
  source "$here/../tests/testing/namespace_hosts.sh"
  make_hosts
  write_agent
  # shellcheck disable=SC2154  # ip: set by namespace_hosts.sh
  printf '%s slots=1\n%s slots=1\n' "${ip[a]}" "${ip[b]}" > "$work/one_each"
  points host_mpirun "$work/one_each" 2 | tag 2
  [ "$max" -lt 4 ] || points host_mpirun "$work/two_hosts" 4 | tag 2
fi

/usr/bin/python3 "$here/scaling_model.py" compare "$out.jsonl" "$out.jsonl" --cores "$(nproc)" |
  tee "${out}_model.txt"
/usr/bin/python3 "$here/plot_scaling.py" "$out.jsonl" "$out.png" && echo "wrote $out.png"
