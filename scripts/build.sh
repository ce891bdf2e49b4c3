#!/usr/bin/env bash
# Installs missing Debian packages, configures and builds momoe (Release) into BUILD_DIR.
# Environment: BUILD_DIR (default build), JOBS (default nproc), MOE_SKIP_INSTALL=1, CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
