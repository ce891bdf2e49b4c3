#!/usr/bin/env bash
# The GPU test command: configures momoe with CUDA for this machine's GPU, builds (warnings are
# errors), runs every test labelled gpu (they compare each CUDA kernel with its CPU reference),
# then the CUDA kernel tests again under compute-sanitizer (memcheck and racecheck).
# Usage: tests/run_gpu.sh [extra ctest args]. Environment: BUILD_DIR (default build-gpu),
# CUDA_ARCH (default 90, the H100/H200), JOBS, CMAKE_ARGS, MOE_SKIP_SANITIZER=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
if ! command -v nvcc > /dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "run_gpu.sh: no nvcc on this machine: the GPU tests need the CUDA toolkit" >&2
  exit 2
fi
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMOE_WERROR=ON -DMOE_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" ${CMAKE_ARGS:-} > /dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
cd "$BUILD_DIR"
if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; fi
ctest -L gpu --output-on-failure "$@"
if [ "${MOE_SKIP_SANITIZER:-0}" != "1" ] && command -v compute-sanitizer > /dev/null; then
  # Smaller cases keep the sanitizer runs to seconds; every kernel is still launched.
  for tool in memcheck racecheck; do
    echo "compute-sanitizer --tool $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 1 tests/kernels/cuda_kernels_test \
      --gtest_filter='CudaKernelTest.*:-*RepeatedRuns*' > "sanitizer-$tool.log" 2>&1 ||
      { tail -50 "sanitizer-$tool.log"; echo "compute-sanitizer $tool failed"; exit 1; }
    tail -3 "sanitizer-$tool.log"
  done
fi
