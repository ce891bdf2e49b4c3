#!/usr/bin/env bash
# Installs missing Debian packages, configures and builds momoe (Release) into BUILD_DIR.
# Environment: BUILD_DIR (default build), JOBS (default nproc), MOE_SKIP_INSTALL=1, CMAKE_ARGS,
# CMAKE_GENERATOR (default Ninja where installed, else CMake's default).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
# A new build folder uses Ninja where it is installed (install_deps.sh installs it): on two cores
# it builds this tree faster than make, whose recursive makefiles recheck every target; an
# existing folder keeps the generator it was made with, and CMAKE_GENERATOR or a -G in
# CMAKE_ARGS wins.
if [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja > /dev/null; then
  export CMAKE_GENERATOR=Ninja
fi
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
