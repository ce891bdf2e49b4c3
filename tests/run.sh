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
summary=()
# run_phase NAME CTEST-ARGS...: one ctest run; its "N% tests passed" line joins the summary.
run_phase() {
  local name=$1; shift
  local log
  log=$(mktemp)
  set +e
  ctest --output-on-failure -j "$jobs" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  set -e
  summary+=("$name: $(grep -E 'tests passed' "$log" | tail -1 || echo 'no summary')")
  rm -f "$log"
  [ "$rc" -eq 0 ] || failed+=("$name")
}

bench=benchmarks/momoe-bench
echo "== every CPU test, with the BLAS kernel momoe picks for this CPU:"
picked=""
if [ -x "$bench" ]; then
  env_line=$("$bench" env)
  echo "$env_line"
  picked=$(echo "$env_line" | sed -n 's/.*"blas_kernel": "\([^"]*\)".*/\1/p')
fi
run_phase "default kernel${picked:+ ($picked)}" -L 'cpu|mpi' "$@"

if [ ! -x "$bench" ]; then
  echo "== no momoe-bench (MOE_BUILD_BENCHMARKS=OFF): cannot ask which OpenBLAS kernels this CPU runs; the BLAS-kernel phases are not run"
else
  for kernel in ${BLAS_KERNELS-Prescott Haswell SkylakeX Cooperlake Zen}; do
    if [ "$kernel" = "$picked" ]; then
      echo "== OPENBLAS_CORETYPE=$kernel: the kernel momoe picks here; ran above"
      continue
    fi
    # momoe-bench env refuses a kernel this CPU cannot run with exit 2 (and the reason); any
    # other failure is a failure.
    set +e
    why=$(OPENBLAS_CORETYPE=$kernel "$bench" env 2>&1 >/dev/null)
    rc=$?
    set -e
    if [ "$rc" -eq 2 ]; then
      echo "== OPENBLAS_CORETYPE=$kernel: not run on this CPU: ${why#*] }"
      continue
    elif [ "$rc" -ne 0 ]; then
      echo "== OPENBLAS_CORETYPE=$kernel: momoe-bench env failed (exit $rc): $why" >&2
      failed+=("$kernel (momoe-bench env)")
      continue
    fi
    echo "== the BLAS-sensitive tests (label blas) under OPENBLAS_CORETYPE=$kernel:"
    OPENBLAS_CORETYPE=$kernel run_phase "$kernel" -L blas "$@"
  done
fi

echo "== summary"
for line in "${summary[@]}"; do echo "  $line"; done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED under: ${failed[*]}" >&2
  exit 1
fi
echo "all phases passed"
