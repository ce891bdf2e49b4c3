#!/usr/bin/env bash
# tests/run_gpu.sh on a machine without a GPU (CI): the stages skip cleanly and the exit status is
# 0; with a GPU required (MOMOE_REQUIRE_GPU=1) the same run fails; told a GPU is there
# (MOMOE_GPUS=1) when CUDA cannot use one, the GPU tests fail naming the CUDA error instead of
# skipping, and a missing compute-sanitizer fails its stage; a run past its deadline reports the
# stages it could not start. Usage: run_gpu_script_test.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
if nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then echo "a GPU is visible: nothing to practise"; exit 0; fi
# The script's scratch (MOMOE_GPU_WORK) lives in $out too: nothing is left in /tmp.
run() { BUNDLE=/nonexistent BUILD_DIR=$build MOMOE_GPU_WORK=$out/work "$root/tests/run_gpu.sh" "$@"; }

run --out "$out/a" > "$out/a.txt" 2>&1 || { cat "$out/a.txt"; fail "no GPU: exit $?"; }
grep -q '^env  *passed' "$out/a/summary.txt" || fail "env did not pass"
[ "$(grep -c 'skipped (no GPU)' "$out/a/summary.txt")" -eq 10 ] || { cat "$out/a/summary.txt"; fail "not every GPU stage skipped"; }
grep -q 'libraries found' "$out/a/env.log" || fail "env.log does not check the binaries' libraries"

# The stages run only when named (issue 21's layer benchmark) are accepted and skip likewise.
run --out "$out/e" layer > "$out/e.txt" 2>&1 || { cat "$out/e.txt"; fail "layer without a GPU: exit $?"; }
grep -q '^layer  *skipped (no GPU)' "$out/e/summary.txt" || { cat "$out/e/summary.txt"; fail "layer did not skip"; }
run --list | grep -q '^layer .*(only when named)' || fail "--list does not show the layer stage"

if MOMOE_REQUIRE_GPU=1 run --out "$out/b" > "$out/b.txt" 2>&1; then fail "a required GPU that is missing passed"; fi
grep -q 'FAILED (no GPU)' "$out/b/summary.txt" || fail "no 'FAILED (no GPU)' verdict"

if PATH=$(echo "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd:) MOMOE_GPUS=1 \
    run --out "$out/c" kernels memcheck > "$out/c.txt" 2>&1; then
  fail "GPU stages passed without a usable GPU"
fi
grep -q '^kernels  *FAILED' "$out/c/summary.txt" || fail "kernels did not fail"
grep -q 'MOMOE_REQUIRE_GPU=1 but no CUDA device is usable: ' "$out/c/kernels.log" ||
  fail "the kernel tests did not name why CUDA is unusable"
grep -q '^memcheck  *FAILED' "$out/c/summary.txt" || fail "a missing compute-sanitizer did not fail"
[ -f "$out/c/cuda_kernels_test.xml" ] || fail "no XML report beside the log"

if MOMOE_GPUS=1 run --out "$out/d" --deadline 0 kernels > "$out/d.txt" 2>&1; then fail "out of time passed"; fi
grep -q 'not run (out of time)' "$out/d/summary.txt" || fail "no 'out of time' verdict"
echo PASS
