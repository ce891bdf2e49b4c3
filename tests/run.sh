#!/usr/bin/env bash
# The test command: installs missing Debian packages, configures, builds (warnings are errors),
# and runs every CPU test, the single-process ones and those under mpirun (-np 2 and -np 4).
# Usage: tests/run.sh [extra ctest args]. Environment: BUILD_DIR (default build), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
export CMAKE_ARGS="${CMAKE_ARGS:-} -DMOE_WERROR=ON"
scripts/build.sh
# OpenBLAS threads would oversubscribe the cores under mpirun and parallel ctest.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
cd "${BUILD_DIR:-build}"
ctest -L 'cpu|mpi' --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
