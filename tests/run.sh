#!/usr/bin/env bash
# The test command: installs missing Debian packages, configures, builds, and runs every CPU test
# (single-process and mpirun ones). Usage: tests/run.sh [extra ctest args]
# Environment: BUILD_DIR (default build), JOBS (default nproc), MOE_SKIP_INSTALL=1 to skip apt.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install_deps.sh

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DMOE_WERROR=ON
cmake --build "$BUILD_DIR" -j "$JOBS"
# OpenBLAS threads would oversubscribe the cores under mpirun and in parallel ctest.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
cd "$BUILD_DIR"
ctest -L 'cpu|mpi' --output-on-failure -j "$JOBS" "$@"
