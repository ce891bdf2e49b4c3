#!/usr/bin/env bash
# The test command: installs missing Debian packages, configures, builds (warnings are errors),
# and runs every CPU test, the single-process ones and those under mpirun (-np 2 and -np 4), with
# the BLAS kernel momoe picks for this CPU. Then it runs the BLAS-sensitive tests (label blas:
# those that compare results across shapes, ranks, thread counts or layouts) again under each
# OpenBLAS kernel of BLAS_KERNELS that this CPU can run, and names the ones it cannot.
# Usage: tests/run.sh [extra ctest args]. Environment: BUILD_DIR (default build), JOBS,
# BLAS_KERNELS (default "Prescott Haswell SkylakeX Cooperlake Zen"; empty: none).
set -euo pipefail
cd "$(dirname "$0")/.."
export CMAKE_ARGS="${CMAKE_ARGS:-} -DMOE_WERROR=ON"
scripts/build.sh
cd "${BUILD_DIR:-build}"
jobs=${JOBS:-$(nproc)}
# A kernel forced by the caller's environment would apply to every phase: the default phase
# must run what momoe picks.
unset OPENBLAS_CORETYPE MOMOE_BLAS

failed=()
echo "== every CPU test, with the BLAS kernel momoe picks for this CPU:"
benchmarks/momoe-bench env
ctest -L 'cpu|mpi' --output-on-failure -j "$jobs" "$@" || failed+=("default kernel")

for kernel in ${BLAS_KERNELS-Prescott Haswell SkylakeX Cooperlake Zen}; do
  # momoe-bench env refuses (exit 2, with the reason) a kernel this CPU cannot run.
  if ! why=$(OPENBLAS_CORETYPE=$kernel benchmarks/momoe-bench env 2>&1 >/dev/null); then
    echo "== OPENBLAS_CORETYPE=$kernel: not run on this CPU: ${why#*] }"
    continue
  fi
  echo "== the BLAS-sensitive tests (label blas) under OPENBLAS_CORETYPE=$kernel:"
  OPENBLAS_CORETYPE=$kernel ctest -L blas --output-on-failure -j "$jobs" "$@" ||
    failed+=("$kernel")
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED under: ${failed[*]}" >&2
  exit 1
fi
