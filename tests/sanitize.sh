#!/usr/bin/env bash
# The host sanitizer phase: builds the unit tests below with AddressSanitizer and
# UndefinedBehaviorSanitizer (-O0 -g1, no CUDA, no MPI, no NCCL; any report fails) into
# build-sanitize/ and runs them. -O0 halves the build (about 4.5 minutes on 2 cores, against 9
# at -O1); the tests still run in under a minute. The subset is the code a memory or UB bug
# hides in that runs in seconds under the sanitizers: the ground floor (base, io), the CPU loops
# of every kernel with their GEMM and BLAS loader, the data pipeline and the MoE layer (forward,
# backward, gradient checks). The protobuf-based tests (checkpoint files, statistics, the config
# converter) are left out: building the generated protobuf code and everything above it under
# ASan costs more than the whole phase otherwise does, and that code is protobuf's own. The
# trainer's and the executables' tests are left to the Release phases (minutes each under ASan,
# and built from the same code).
# Usage: tests/sanitize.sh. Environment: SANITIZE_BUILD_DIR (default build-sanitize), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${SANITIZE_BUILD_DIR:-build-sanitize}
jobs=${JOBS:-$(nproc)}
tests=(base_test child_process_test tfrecord_test comm_local_test data_test
       gemm_test blas_library_test activation_test router_test embedding_test layernorm_test
       attention_test cross_entropy_test optimizer_test elementwise_test moe_dispatch_test
       residual_test moe_stats_test init_test moe_layer_test moe_layer_grad_test)
# Ninja where installed (as scripts/build.sh): a new folder only; an existing one keeps its own.
if [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja > /dev/null; then
  export CMAKE_GENERATOR=Ninja
fi
flags="-O0 -g1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Sanitize -DMOE_WITH_CUDA=OFF -DMOE_WITH_MPI=OFF \
  -DMOE_WITH_NCCL=OFF -DMOE_BUILD_BENCHMARKS=OFF -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" > /dev/null
cmake --build "$dir" -j "$jobs" --target "${tests[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export OPENBLAS_NUM_THREADS=1
# Each binary runs whole; its output is kept and shown only when it fails.
logs=$(mktemp -d "${TMPDIR:-/tmp}/momoe_sanitize.XXXXXX")
trap 'rm -rf "$logs"' EXIT
run_one() {
  local bin
  bin=$(find "$1" -type f -name "$2" -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "sanitize: no binary $2 in $1" > "$3/$2.log"; return 1; }
  "$bin" --gtest_brief=1 > "$3/$2.log" 2>&1
}
export -f run_one
set +e
printf '%s\n' "${tests[@]}" |
  xargs -P "$jobs" -I{} bash -c 'if run_one "$0" {} "$1"; then echo "sanitize: {} passed";
                                 else echo "sanitize: {} FAILED"; touch "$1/{}.failed"; fi' \
    "$dir/tests" "$logs"
set -e
if compgen -G "$logs/*.failed" > /dev/null; then
  for t in "${tests[@]}"; do
    [ -e "$logs/$t.failed" ] || continue
    echo "== $t"
    grep -E -A12 "ERROR: (Address|Leak)Sanitizer|runtime error:|\[  FAILED  \]" "$logs/$t.log" |
      head -80 || tail -40 "$logs/$t.log"
  done
  echo "sanitize: a test failed or a sanitizer reported (above)" >&2
  exit 1
fi
echo "sanitize: ${#tests[@]} test binaries passed under ASan and UBSan"
