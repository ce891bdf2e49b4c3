#!/usr/bin/env bash
# The GPU test command: every check a GPU session runs, in time-boxed stages, with everything it
# produces under one output directory (one log per stage, summary.txt with each stage's verdict).
#
#   tests/run_gpu.sh [--out DIR] [--deadline SECONDS] [STAGE ...]
#       Runs the stages (all, in the order below, by default; name some to run only those: the
#       fix-and-rerun loop). A stage that fails or overruns its time box does not stop the
#       others; the whole run ends before --deadline seconds (default 570: one device call).
#   tests/run_gpu.sh pack [FILE]
#       On the CPU machine: bundles the binaries of BUILD_DIR (default build, which CMake builds
#       for sm_90 by default) with the shared libraries a bare GPU machine lacks (protobuf,
#       OpenMPI with mpirun and its plugins, OpenBLAS for the CPU reference) into FILE (default
#       gpu-bundle.tar.xz in the source root, ignored by git). The lent GPU machine has nvcc and
#       the CUDA libraries (NCCL in PyTorch's wheels) but no protobuf, GoogleTest or OpenMPI and
#       no network, so it runs this bundle instead of building.
#   tests/run_gpu.sh --list
#
# Stages (time box in seconds):
#   env        30  the GPU, driver, nvcc, compute-sanitizer, the libraries found, the bundle
#   build     420  only without a bundle: configure and build BUILD_DIR (default build-gpu) with
#                  CMAKE_CUDA_ARCHITECTURES=$CUDA_ARCH (default 90), warnings as errors
#   kernels   150  every op against its CPU reference (cuda_kernels_test); the per-op table of
#                  max relative errors, FP32 and BF16, goes to op_errors.txt
#   model     240  the whole model, every config family: FP32 GPU vs CPU over 20 steps, BF16 over
#                  100, repeat runs, checkpoints across devices, one sync per step
#                  (gpu_training_test); the per-family lines go to model_report.txt
#   smoke     120  training throughput on the GPU: momoe-bench train (quickstart, smoe-medium; FP32
#                  and BF16), a 40-step momoe-train run, and the cuBLAS bf16 GEMM rate (through
#                  PyTorch, for MFU) -> smoke.jsonl
#   nccl       60  the NCCL backend at one rank (comm_nccl_test)
#   memcheck  120  compute-sanitizer on the kernel tests, one tool per stage
#   synccheck  90
#   racecheck 150
#   initcheck  90  compute-sanitizer initcheck on two training steps of a tiny model
#   mpi       150  2 and 4 MPI ranks sharing the GPU (EP 2, EP 2 x DP 2) equal to 1 rank
#                  (parallel_trainer_mpi_test with MOMOE_TEST_DEVICE=CUDA)
# Only when named (issue 21, once the stages above pass):
#   layer     450  momoe's MoE layer against PyTorch's grouped-GEMM layer in the same run
#                  (momoe-bench layer --device cuda --shape 1..4 --torch 1: bf16, dropless, after
#                  the reference's --check), with the device's copy bandwidth and GEMM rate
#                  -> layer.jsonl. Repack the bundle first (an older momoe-bench has no --shape).
#
# Scratch (the unpacked bundle, the smoke runs' directories) goes to $MOMOE_GPU_WORK (default
# $TMPDIR/momoe-gpu-work-<uid>), never into the output directory.
#
# Without a GPU (nvidia-smi lists none) every stage after env is "skipped (no GPU)" and the exit
# status is 0, unless MOMOE_REQUIRE_GPU=1 (then 1). With a GPU, MOMOE_REQUIRE_GPU=1 is set for the
# tests, so a GPU the CUDA runtime cannot use fails them instead of skipping them; a missing
# compute-sanitizer fails its stages. Exit status: 0 when every stage run passed, 1 otherwise.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SELF="$ROOT/tests/run_gpu.sh"
ALL_STAGES="env build kernels model smoke nccl memcheck synccheck racecheck initcheck mpi"
EXTRA_STAGES="layer"
declare -A BOX=([env]=30 [build]=420 [kernels]=150 [model]=240 [smoke]=120 [nccl]=60
                [memcheck]=120 [synccheck]=90 [racecheck]=150 [initcheck]=90 [mpi]=150
                [layer]=450)
BUNDLE=${BUNDLE:-$ROOT/gpu-bundle.tar.xz}
KERNEL_FILTER='CudaKernelTest.*:-*RepeatedRuns*:*LargeShapes*'  # sanitizers: small cases

die() { echo "run_gpu.sh: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
# pack (CPU machine)

copy_deps() {  # copy_deps DEST FILE...: the shared libraries FILEs need that a GPU machine lacks
  local dest=$1; shift
  ldd "$@" 2>/dev/null | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|libstdc++.so*|\
      libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*|libz.so*) ;;
      *) [ -e "$dest/$(basename "$lib")" ] || cp -L "$lib" "$dest/" ;;
    esac
  done
}

pack() {
  local out=${1:-$BUNDLE}
  local build=${BUILD_DIR:-build}
  case $build in /*) ;; *) build=$ROOT/$build ;; esac
  local cache=$build/CMakeCache.txt
  [ -f "$cache" ] || die "pack: $build is not a build directory (run scripts/build.sh first)"
  grep -q '^MOE_WITH_CUDA:BOOL=ON' "$cache" || die "pack: $build was configured without CUDA"
  # The device code the kernels were compiled for (nvcc's flags; this machine has no cuobjdump).
  local arch
  arch=$(grep -o 'generate-code=arch=[^ ]*' "$build/kernels/cuda/CMakeFiles/moe_kernels_cuda.dir/flags.make" |
         sed 's/.*code=\[*//; s/\]//' | sort -u | tr '\n' ' ')
  [[ "$arch" == *sm_90* ]] ||
    die "pack: $build builds CUDA code for '$arch', not sm_90 (reconfigure with -DCMAKE_CUDA_ARCHITECTURES=90)"
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  mkdir -p "$tmp/bin" "$tmp/lib"
  local bins=(tests/kernels/cuda_kernels_test tests/comm/comm_nccl_test tests/core/gpu_training_test
              launcher/momoe-train launcher/momoe-eval benchmarks/momoe-bench)
  [ -x "$build/tests/core/parallel_trainer_mpi_test" ] && bins+=(tests/core/parallel_trainer_mpi_test)
  local b
  for b in "${bins[@]}"; do
    [ -x "$build/$b" ] || die "pack: $build/$b is missing (build every target first)"
    cp "$build/$b" "$tmp/bin/"
  done
  copy_deps "$tmp/lib" "$tmp"/bin/*
  # The CPU reference's BLAS is loaded at run time (kernels/reference/blas_library.h).
  local blas
  blas=$(ldconfig -p | awk '/libopenblas\.so\.0 / {print $NF; exit}')
  [ -n "$blas" ] || die "pack: libopenblas.so.0 not found (scripts/install_deps.sh installs it)"
  cp -L "$blas" "$tmp/lib/libopenblas.so.0"
  copy_deps "$tmp/lib" "$blas"
  # OpenMPI: mpirun and its plugins, relocated with OPAL_PREFIX to $tmp/mpi/usr.
  local orterun
  orterun=$(command -v orterun || true)
  if [ -n "$orterun" ]; then
    local libdir=/usr/lib/x86_64-linux-gnu
    mkdir -p "$tmp/mpi/usr/bin" "$tmp/mpi/usr/share" "$tmp/mpi/usr/lib/x86_64-linux-gnu"
    cp "$orterun" "$tmp/mpi/usr/bin/mpirun"
    cp "$(command -v orted)" "$tmp/mpi/usr/bin/"
    cp -a "$libdir/openmpi" "$tmp/mpi/usr/lib/x86_64-linux-gnu/"
    [ -d "$libdir/pmix2" ] && cp -a "$libdir/pmix2" "$tmp/mpi/usr/lib/x86_64-linux-gnu/"
    cp -a /usr/share/openmpi "$tmp/mpi/usr/share/"
    [ -d /usr/share/pmix ] && cp -a /usr/share/pmix "$tmp/mpi/usr/share/"
    copy_deps "$tmp/lib" "$tmp/mpi/usr/bin/mpirun" "$tmp/mpi/usr/bin/orted" \
      $(find "$tmp/mpi" -name '*.so' -type f)
  fi
  {
    echo "source_rev $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')"
    echo "packed_at $(date -u +%FT%TZ) on $(hostname)"
    echo "cuda_architectures $arch"
    echo "build_type $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")"
    echo "binaries ${bins[*]}"
  } > "$tmp/MANIFEST"
  case $out in /*) ;; *) out=$PWD/$out ;; esac
  tar -C "$tmp" -cJf "$out" .
  echo "run_gpu.sh: packed $(ls "$tmp/bin" | wc -l) binaries and $(ls "$tmp/lib" | wc -l) libraries" \
       "into $out ($(du -h "$out" | cut -f1)); carry it and run tests/run_gpu.sh on the GPU machine"
}

# ---------------------------------------------------------------------------------------------
# The stages (each runs in its own process under `timeout`, writing to OUT/<stage>.log)

gtest() {  # gtest BINARY [ARGS]: a test binary, its XML report beside the log
  local bin=$1; shift
  "$BIN/$bin" --gtest_output="xml:$OUT/$bin.xml" "$@"
}

sanitizer() {  # sanitizer TOOL: compute-sanitizer TOOL on the kernel tests
  command -v compute-sanitizer > /dev/null ||
    { echo "compute-sanitizer is not on PATH: the sanitizer stages cannot run"; return 1; }
  compute-sanitizer --tool "$1" --error-exitcode 1 "$BIN/cuda_kernels_test" \
    --gtest_filter="$KERNEL_FILTER"
}

stage_env() {
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); cores: $(nproc)"
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  else
    echo "nvidia-smi: not found"
  fi
  command -v nvcc > /dev/null && nvcc --version | tail -2
  command -v compute-sanitizer > /dev/null && compute-sanitizer --version | head -2 ||
    echo "compute-sanitizer: not found"
  echo "binaries: $BIN"
  [ -f "$BIN/../MANIFEST" ] && cat "$BIN/../MANIFEST"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  local b
  for b in "$BIN"/*; do
    [ -x "$b" ] || continue
    local missing
    missing=$(ldd "$b" 2>/dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    echo "$(basename "$b"): ${missing:+MISSING $missing}${missing:-libraries found}"
  done
  command -v cuobjdump > /dev/null && [ -x "$BIN/cuda_kernels_test" ] &&
    echo "device code in cuda_kernels_test: $(cuobjdump --list-elf "$BIN/cuda_kernels_test" 2>/dev/null |
      grep -o 'sm_[0-9a-z]*' | sort -u | tr '\n' ' ')"
  "$BIN/momoe-bench" env 2>&1 | head -3
  return 0
}

stage_build() {
  [ -n "$BUNDLE_DIR" ] && { echo "binaries from the bundle $BUNDLE (see env.log): nothing to build"; return 0; }
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMOE_WERROR=ON -DMOE_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" ${CMAKE_ARGS:-} &&
    cmake --build "$BUILD" -j "${JOBS:-$(nproc)}"
}

stage_kernels() {
  gtest cuda_kernels_test
  local rc=$?
  # The per-op table the test prints at exit.
  sed -n '/^max relative error, GPU vs CPU reference:/,$p' "$OUT/kernels.log" > "$OUT/op_errors.txt"
  return $rc
}

stage_model() {
  gtest gpu_training_test
  local rc=$?
  grep '^\[ gpu \]' "$OUT/model.log" > "$OUT/model_report.txt"
  return $rc
}

stage_smoke() {
  local rc=0 precision preset
  for precision in FP32 BF16; do
    "$BIN/momoe-bench" train --device cuda --precision "$precision" --preset all --steps 5 \
      --warmup 2 --config "$ROOT/configs/quickstart.pbtxt" | tee -a "$OUT/smoke.jsonl" || rc=1
  done
  # A real run through momoe-train: its log has tokens/s per logged step.
  "$BIN/momoe-train" --config "$ROOT/configs/quickstart.pbtxt" --run-dir "$WORK/smoke-run" --fresh \
    --set train.device=CUDA --set train.steps=40 --set train.eval_every=0 \
    --set train.eval_sequences=32 || rc=1
  # The cuBLAS bf16 GEMM rate on this GPU (PyTorch's matmul calls cuBLAS): MFU's denominator.
  python3 - <<'EOF' | tee -a "$OUT/smoke.jsonl" || rc=1
import json, torch
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(10):
    a @ b
end.record()
torch.cuda.synchronize()
seconds = start.elapsed_time(end) / 1e3 / 10
print(json.dumps({"bench": "cublas_bf16_gemm", "n": n, "device": torch.cuda.get_device_name(),
                  "tflops": 2 * n**3 / seconds / 1e12}))
EOF
  return $rc
}

stage_layer() {
  local rc=0 shape
  export MOMOE_PYTHON=${MOMOE_PYTHON:-$(command -v python3)}
  export MOMOE_TORCH_REFERENCE=$ROOT/benchmarks/torch_moe_reference.py
  "$MOMOE_PYTHON" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"
assert hasattr(torch, "_grouped_mm"), "torch %s has no _grouped_mm" % torch.__version__' || return 1
  # The reference's check with many empty experts (16 tokens, 64 experts), grouped and loop.
  "$MOMOE_PYTHON" "$MOMOE_TORCH_REFERENCE" layer --device cuda --tokens 16 --d 64 --f 128 \
    --experts 64 --top-k 2 --check --iterations 1 --warmup 0 | tee -a "$OUT/layer.jsonl" || return 1
  for shape in 1 2 3 4; do
    "$BIN/momoe-bench" layer --device cuda --shape "$shape" --torch 1 | tee -a "$OUT/layer.jsonl" ||
      rc=1
  done
  return $rc
}

stage_nccl() { gtest comm_nccl_test; }
stage_memcheck() { sanitizer memcheck; }
stage_synccheck() { sanitizer synccheck; }
stage_racecheck() { sanitizer racecheck; }

stage_initcheck() {
  command -v compute-sanitizer > /dev/null ||
    { echo "compute-sanitizer is not on PATH: the sanitizer stages cannot run"; return 1; }
  compute-sanitizer --tool initcheck --error-exitcode 1 "$BIN/momoe-train" \
    --config "$ROOT/tests/launcher/tiny_config.pbtxt" --run-dir "$WORK/initcheck-run" --fresh \
    --set train.device=CUDA --set train.steps=2 --set train.eval_every=0 \
    --set train.eval_sequences=4 --set train.checkpoint_every=0
}

stage_mpi() {
  local mpirun
  mpirun=$(command -v mpirun || true)
  [ -n "$mpirun" ] || { echo "mpirun is not available (neither bundled nor installed)"; return 1; }
  [ -x "$BIN/parallel_trainer_mpi_test" ] || { echo "parallel_trainer_mpi_test was not built"; return 1; }
  local rc=0 np
  for np in 2 4; do
    echo "== mpirun -np $np (ranks share the GPU through the MPI backend)"
    MOMOE_TEST_DEVICE=CUDA "$mpirun" --allow-run-as-root --oversubscribe -np "$np" \
      -x MOMOE_TEST_DEVICE -x MOMOE_SOURCE_DIR -x MOMOE_REQUIRE_GPU -x LD_LIBRARY_PATH \
      "$BIN/parallel_trainer_mpi_test" || rc=1
  done
  return $rc
}

# ---------------------------------------------------------------------------------------------
# Driver

if [ "${1:-}" = pack ]; then
  shift
  pack "$@"
  exit $?
fi
if [ "${1:-}" = --list ]; then
  for s in $ALL_STAGES; do printf '%-10s %4s s\n' "$s" "${BOX[$s]}"; done
  for s in $EXTRA_STAGES; do printf '%-10s %4s s  (only when named)\n' "$s" "${BOX[$s]}"; done
  exit 0
fi

if [ "${1:-}" = --run-stage ]; then  # internal: one stage, in the environment the driver set
  "stage_$2"
  exit $?
fi

OUT=${OUT:-$ROOT/gpu-results}
DEADLINE=570
STAGES=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --deadline) DEADLINE=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown flag $1 (see --help)" ;;
    *) [ -n "${BOX[$1]+x}" ] || die "unknown stage '$1' (stages: $ALL_STAGES $EXTRA_STAGES)"; STAGES+=("$1"); shift ;;
  esac
done
[ ${#STAGES[@]} -gt 0 ] || read -r -a STAGES <<< "$ALL_STAGES"
mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
START=$(date +%s)

# Scratch outside OUT (on the GPU machine OUT is what comes back: logs, not binaries or runs).
WORK=${MOMOE_GPU_WORK:-${TMPDIR:-/tmp}/momoe-gpu-work-$(id -u)}
mkdir -p "$WORK" || die "cannot create $WORK"
# The binaries: the bundle (unpacked into WORK once per bundle) or a build directory.
BUNDLE_DIR=""
if [ -f "$BUNDLE" ]; then
  BUNDLE_DIR=$WORK/bundle
  if [ ! -f "$BUNDLE_DIR/.unpacked" ] || [ "$BUNDLE" -nt "$BUNDLE_DIR/.unpacked" ]; then
    rm -rf "$BUNDLE_DIR" && mkdir -p "$BUNDLE_DIR" && tar -C "$BUNDLE_DIR" -xJf "$BUNDLE" &&
      touch "$BUNDLE_DIR/.unpacked" || die "cannot unpack $BUNDLE"
  fi
  BIN=$BUNDLE_DIR/bin
  LIBS=$BUNDLE_DIR/lib
  if [ -x "$BUNDLE_DIR/mpi/usr/bin/mpirun" ]; then
    export OPAL_PREFIX=$BUNDLE_DIR/mpi/usr
    export PATH=$BUNDLE_DIR/mpi/usr/bin:$PATH
    export OMPI_MCA_mca_base_component_path=$OPAL_PREFIX/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
    [ -d "$OPAL_PREFIX/lib/x86_64-linux-gnu/pmix2" ] &&
      export PMIX_MCA_mca_base_component_path=$OPAL_PREFIX/lib/x86_64-linux-gnu/pmix2/lib/pmix
  fi
  BUILD=""
else
  BUILD=${BUILD_DIR:-build-gpu}
  case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
  BIN=$WORK/bin  # links to the build's binaries, filled after the build stage
  LIBS=""
fi
# CUDA's own libraries: the toolkit's, and NCCL/cuBLAS from PyTorch's wheels where present.
CUDA_LIBS=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [ -d "$d" ] && CUDA_LIBS=$CUDA_LIBS:$d; done
if command -v python3 > /dev/null; then
  WHEELS=$(python3 - 2>/dev/null <<'EOF'
import importlib.util
for name in ("nvidia.nccl", "nvidia.cublas", "nvidia.cuda_runtime"):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    if spec and spec.submodule_search_locations:
        print(list(spec.submodule_search_locations)[0] + "/lib")
EOF
  )
  for d in $WHEELS; do [ -d "$d" ] && CUDA_LIBS=$CUDA_LIBS:$d; done
fi
LIBRARY_PATH_=${LIBS}${CUDA_LIBS}
LIBRARY_PATH_=${LIBRARY_PATH_#:}  # no empty entry: the loader would read it as the current directory
export LD_LIBRARY_PATH=${LIBRARY_PATH_}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MOMOE_SOURCE_DIR=$ROOT MOMOE_DATA_DIR=$ROOT/data
export OUT WORK BIN BUILD BUNDLE BUNDLE_DIR
cd "$ROOT" || exit 2

# MOMOE_GPUS overrides the count (practising the GPU path on a CPU machine: the tests then fail,
# naming why CUDA is unusable, instead of skipping).
GPUS=${MOMOE_GPUS:-0}
if [ -z "${MOMOE_GPUS:-}" ] && command -v nvidia-smi > /dev/null; then
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi
if [ "$GPUS" -gt 0 ]; then export MOMOE_REQUIRE_GPU=1; fi

link_build_binaries() {
  mkdir -p "$BIN"
  local b
  for b in tests/kernels/cuda_kernels_test tests/comm/comm_nccl_test tests/core/gpu_training_test \
           tests/core/parallel_trainer_mpi_test launcher/momoe-train launcher/momoe-eval \
           benchmarks/momoe-bench; do
    [ -x "$BUILD/$b" ] && ln -sf "$BUILD/$b" "$BIN/"
  done
}
[ -z "$BUNDLE_DIR" ] && link_build_binaries

SUMMARY=$OUT/summary.txt
printf '%-10s %-28s %8s  %s\n' stage verdict seconds log > "$SUMMARY"
FAILED=0
BUILD_FAILED=0  # the later stages would run stale binaries
for stage in "${STAGES[@]}"; do
  now=$(date +%s)
  left=$((START + DEADLINE - now))
  log=$OUT/$stage.log
  verdict=""
  if [ "$stage" != env ] && [ "$GPUS" -eq 0 ]; then
    verdict="skipped (no GPU)"
    [ "${MOMOE_REQUIRE_GPU:-0}" = 1 ] && { verdict="FAILED (no GPU)"; FAILED=1; }
  elif [ "$stage" = build ] && [ -n "$BUNDLE_DIR" ]; then
    verdict="skipped (bundle)"
  elif [ "$BUILD_FAILED" = 1 ]; then
    verdict="skipped (build failed)"
  elif [ "$left" -lt 15 ]; then
    verdict="not run (out of time)"
    FAILED=1
  fi
  if [ -n "$verdict" ]; then
    printf '%-10s %-28s %8s  %s\n' "$stage" "$verdict" - - | tee -a "$SUMMARY"
    continue
  fi
  box=${BOX[$stage]}
  [ "$box" -gt "$left" ] && box=$left
  echo "== $stage (at most ${box} s) -> $log"
  t0=$(date +%s)
  timeout --kill-after=10 "$box" "$SELF" --run-stage "$stage" > "$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - t0))
  case $rc in
    0) verdict=passed ;;
    124|137) verdict="TIMED OUT (${box} s)"; FAILED=1 ;;
    *) verdict="FAILED (exit $rc)"; FAILED=1 ;;
  esac
  if [ "$stage" = build ]; then
    if [ $rc -eq 0 ]; then link_build_binaries; else BUILD_FAILED=1; fi
  fi
  printf '%-10s %-28s %8s  %s\n' "$stage" "$verdict" "$secs" "$(basename "$log")" | tee -a "$SUMMARY"
  [ $rc -ne 0 ] && tail -15 "$log" | sed 's/^/    /'
done
echo "results: $OUT (summary.txt; $(( $(date +%s) - START )) s)"
exit $FAILED
