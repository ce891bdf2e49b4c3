#!/usr/bin/env bash
# The quick-start training command: builds momoe if needed, then runs momoe-train with the given
# flags (default: the quick-start config on the bundled Brown corpus, run directory runs/quickstart).
#   scripts/train.sh                                   # configs/quickstart.pbtxt
#   scripts/train.sh --config configs/smoe.pbtxt --set train.steps=1000
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build} scripts/build.sh >/dev/null
# momoe-train uses every core (parallel.threads = 0: its own thread pool, with BLAS single-threaded
# inside it); one OpenBLAS thread keeps OpenBLAS from starting an idle pool of its own.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--config configs/quickstart.pbtxt)
exec "${BUILD_DIR:-build}/launcher/momoe-train" "${args[@]}"
