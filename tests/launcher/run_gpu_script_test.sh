#!/usr/bin/env bash
# tests/run_gpu.sh on a machine without a GPU (CI).
# From the build tree: the stages skip cleanly and the exit status is 0; OUT holds exactly
# summary.txt, digest.txt and results.tgz; with a GPU required (MOMOE_REQUIRE_GPU=1) the same run
# fails and the digest says why; told a GPU is there (MOMOE_GPUS=1) when CUDA cannot use one, the
# GPU tests fail naming the CUDA error, and a missing compute-sanitizer fails its stage; a run past
# its deadline reports the stages it could not start; the transformers stage fails saying so where
# python3 cannot import transformers; call 2 computes its deadline from the GPU time left and
# reruns what call 1 did not pass.
# From a bundle: `run_gpu.sh pack --fast`, unpacked and run in a mount namespace where the
# system's OpenMPI, protobuf and the build tree are hidden: the env stage finds every library in
# the bundle, the bundled mpirun starts and the MPI test passes at 2 and 4 ranks (on the CPU), and
# without a GPU the bundle's default MOMOE_REQUIRE_GPU=1 fails the GPU stages with a clear message.
# Usage: run_gpu_script_test.sh BUILD_DIR
set -uo pipefail
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$out"' EXIT
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
if nvidia-smi -L 2> /dev/null | grep -q '^GPU '; then echo "a GPU is visible: nothing to practise"; exit 0; fi
# The script's scratch (MOMOE_GPU_WORK) lives in $out too: nothing is left in /tmp.
run() { BUNDLE=/nonexistent BUILD_DIR=$build MOMOE_GPU_WORK=$out/work "$root/tests/run_gpu.sh" "$@"; }
# results DIR FILE: FILE from DIR/results.tgz on stdout. has DIR FILE PATTERN: FILE matches.
results() { tar -xzOf "$1/results.tgz" "results/$2"; }
has() { results "$1" "$2" > "$out/has.txt" && grep -q -- "$3" "$out/has.txt"; }

run --out "$out/a" > "$out/a.txt" 2>&1 || { cat "$out/a.txt"; fail "no GPU: exit $?"; }
[ "$(ls "$out/a" | tr '\n' ' ')" = "digest.txt results.tgz summary.txt " ] ||
  fail "OUT holds $(ls "$out/a" | tr '\n' ' '), not the three files"
grep -q '^env  *passed' "$out/a/summary.txt" || fail "env did not pass"
[ "$(grep -c 'skipped (no GPU)' "$out/a/summary.txt")" -eq 11 ] || { cat "$out/a/summary.txt"; fail "not every GPU stage skipped"; }
has "$out/a" env.log 'libraries found' || fail "env.log does not check the binaries' libraries"
[ "$(tail -1 "$out/a.txt" | cut -c1-9)" = "digest of" ] || fail "stdout does not end with the digest"

# The performance stage (the layer benchmarks) is accepted alone and skips likewise.
run --out "$out/e" layer > "$out/e.txt" 2>&1 || { cat "$out/e.txt"; fail "layer without a GPU: exit $?"; }
grep -q '^layer  *skipped (no GPU)' "$out/e/summary.txt" || { cat "$out/e/summary.txt"; fail "layer did not skip"; }
run --list > "$out/list.txt" || fail "--list: exit $?"
grep -q '^layer .*(call 2)' "$out/list.txt" || fail "--list does not place the layer stage in call 2"
grep -q '^kernels .*(call 1)' "$out/list.txt" || fail "--list does not place kernels in call 1"
grep -q '^transformers .*(call 2)' "$out/list.txt" || fail "--list does not place transformers in call 2"

if MOMOE_REQUIRE_GPU=1 run --out "$out/b" > "$out/b.txt" 2>&1; then fail "a required GPU that is missing passed"; fi
grep -q 'FAILED (no GPU)' "$out/b/summary.txt" || fail "no 'FAILED (no GPU)' verdict"
grep -q 'no GPU: nvidia-smi .*MOMOE_REQUIRE_GPU=1' "$out/b/digest.txt" ||
  { cat "$out/b/digest.txt"; fail "the digest does not say why nothing was checked"; }

if PATH=$(echo "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd:) MOMOE_GPUS=1 \
    run --out "$out/c" kernels memcheck > "$out/c.txt" 2>&1; then
  fail "GPU stages passed without a usable GPU"
fi
grep -q '^kernels  *FAILED' "$out/c/summary.txt" || fail "kernels did not fail"
has "$out/c" kernels.log 'MOMOE_REQUIRE_GPU=1 but no CUDA device is usable: ' ||
  fail "the kernel tests did not name why CUDA is unusable"
grep -q 'rerun alone: .*FAILED' "$out/c/digest.txt" || { cat "$out/c/digest.txt"; fail "failed tests were not rerun alone"; }
grep -q '^memcheck  *FAILED' "$out/c/summary.txt" || fail "a missing compute-sanitizer did not fail"
grep -q 'compute-sanitizer is not on PATH' "$out/c/digest.txt" || fail "the digest does not name the missing sanitizer"
results "$out/c" cuda_kernels_test.xml > /dev/null || fail "no XML report in results.tgz"

if MOMOE_GPUS=1 run --out "$out/d" --deadline 0 kernels > "$out/d.txt" 2>&1; then fail "out of time passed"; fi
grep -q 'not run (out of time)' "$out/d/summary.txt" || fail "no 'out of time' verdict"

# The transformers stage where python3 cannot import transformers (none can be installed on a GPU
# machine): it fails before training, saying why.
mkdir -p "$out/nopy"
printf '#!/bin/sh
echo "ModuleNotFoundError: No module named transformers" >&2
exit 1
' > "$out/nopy/python3"
chmod +x "$out/nopy/python3"
if PATH="$out/nopy:$PATH" MOMOE_GPUS=1 run --out "$out/k" transformers > "$out/k.txt" 2>&1; then
  fail "the transformers stage passed without transformers"
fi
grep -q '^transformers .*FAILED.*transformers missing' "$out/k/summary.txt" ||
  { cat "$out/k/summary.txt"; fail "the summary does not say transformers is missing"; }
grep -q 'cannot import transformers' "$out/k/digest.txt" ||
  { cat "$out/k/digest.txt"; fail "the digest does not say transformers cannot be imported"; }

# Call 2: its deadline from the GPU time left; the stages call 1 did not pass, then its own.
if run call2 --out "$out/f" --gpu-seconds-left 200 --cold > "$out/f.txt" 2>&1; then
  fail "call2 with 200 s left and a cold start ran"
fi
grep -q 'too little' "$out/f.txt" || { cat "$out/f.txt"; fail "call2 does not say its deadline is too short"; }
# (A call 1 killed at its limit leaves no line for the stages it did not reach: they run again.)
printf 'stage verdict\nenv passed\nkernels FAILED (exit 1)\nnccl passed\nmodel TIMED OUT\nmemcheck passed\nsmoke not run (out of time)\nmpi passed\n' \
  > "$out/call1.txt"
run call2 --out "$out/g" --gpu-seconds-left 400 --after "$out/call1.txt" > "$out/g.txt" 2>&1 ||
  { cat "$out/g.txt"; fail "call2 without a GPU: exit $?"; }
[ "$(awk 'NR > 1 {print $1}' "$out/g/summary.txt" | tr '\n' ' ')" = \
  "env kernels model smoke initcheck synccheck racecheck layer transformers " ] ||
  { cat "$out/g/summary.txt"; fail "call2 ran the wrong stages"; }

# --- From a bundle, with the system's OpenMPI, protobuf and the build tree hidden.
"$root/tests/run_gpu.sh" pack --fast "$out/bundle.tar.xz" > "$out/pack.txt" 2>&1 ||
  { cat "$out/pack.txt"; fail "pack (the build needs CUDA: configure with nvcc present)"; }
unshare -m true 2> /dev/null ||
  fail "cannot make a mount namespace (unshare -m; run as root): the bundle cannot be checked alone"
cat > "$out/alone.sh" <<'EOF'
# Inside a private mount namespace: hide what a bare GPU machine lacks, then run $@.
set -e
mount --make-rprivate /
empty=$(mktemp "$ALONE_TMP/empty.XXXXXX")  # under the test's folder: removed with it
chmod 0644 "$empty"
for f in /usr/lib/x86_64-linux-gnu/libmpi*.so.* /usr/lib/x86_64-linux-gnu/libopen-*.so.* \
         /usr/lib/x86_64-linux-gnu/libpmix*.so.* /usr/lib/x86_64-linux-gnu/libprotobuf*.so.* \
         /usr/bin/orterun /usr/bin/orted; do
  [ -f "$f" ] && [ ! -L "$f" ] && mount --bind "$empty" "$f"
done
for d in /usr/lib/x86_64-linux-gnu/openmpi "$HIDE_BUILD"; do [ -d "$d" ] && mount -t tmpfs none "$d"; done
"$@"
EOF
alone() {
  HIDE_BUILD=$build ALONE_TMP=$out unshare -m bash "$out/alone.sh" env BUNDLE="$out/bundle.tar.xz" \
    MOMOE_GPU_WORK="$out/bwork" "$root/tests/run_gpu.sh" "$@"
}
alone --out "$out/h" env > "$out/h.txt" 2>&1 || { cat "$out/h.txt"; fail "the bundle's env stage: exit $?"; }
results "$out/h" env.log > "$out/h.env"
grep -q 'MISSING' "$out/h.env" && { cat "$out/h.env"; fail "a library does not resolve from the bundle"; }
[ "$(grep -c 'libraries found' "$out/h.env")" -ge 8 ] || { cat "$out/h.env"; fail "the bundle's binaries were not checked"; }
grep -q "LD_LIBRARY_PATH=$out/bwork/bundle/lib" "$out/h.env" || fail "the bundle's libraries are not first"
MOMOE_GPUS=1 MOMOE_MPI_DEVICE=CPU alone --out "$out/i" mpi > "$out/i.txt" 2>&1 ||
  { cat "$out/i.txt"; tar -xzOf "$out/i/results.tgz" results/mpi.log | tail -30; fail "the bundle's MPI stage on the CPU"; }
has "$out/i" mpi.log 'mpirun -np 2 true' || fail "the MPI stage does not start with mpirun -np 2 true"
if alone --out "$out/j" kernels > "$out/j.txt" 2>&1; then fail "a bundle without a GPU passed"; fi
grep -q '^kernels  *FAILED (no GPU)' "$out/j/summary.txt" || { cat "$out/j/summary.txt"; fail "a bundle without a GPU did not fail"; }
grep -q 'MOMOE_REQUIRE_GPU=1 (the default with a bundle)' "$out/j/digest.txt" ||
  { cat "$out/j/digest.txt"; fail "the digest does not say a bundle requires a GPU"; }
echo PASS
