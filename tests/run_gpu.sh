#!/usr/bin/env bash
# The GPU test command: every check a GPU session runs, in time-boxed stages ordered by what they
# tell per minute, sized for a lent GPU machine's 15 minutes (its start, transfers and idle time
# included; one call at most 10 minutes; no machine starts with under 4 minutes left; at most 8
# files come back). Two calls:
#
#   On the CPU machine, first (no device time):
#     tests/run_gpu.sh pack                      # -> gpu-bundle.tar.xz (git-ignored: carry it)
#   Device call 1 (the device tool's `run`, carry ["gpu-bundle.tar.xz"], timeout_s 480):
#     tests/run_gpu.sh call1 --out "$OUT"
#   Read summary.txt and digest.txt (stdout ends with the digest) and copy call 1's summary.txt
#   to gpu-results/call1-summary.txt. The machine stays warm only 30 s after a call: when
#   nothing needs fixing first, start call 2 at once; otherwise give it back, fix on the CPU,
#   repack, and call 2 with --cold (carry ["gpu-bundle.tar.xz",
#   "gpu-results/call1-summary.txt"], timeout_s = what status allows):
#     tests/run_gpu.sh call2 --out "$OUT" --gpu-seconds-left N [--cold] \
#         --after gpu-results/call1-summary.txt
#   N is status's budget_left_s; --cold when the machine was given back (a fresh start costs up
#   to 3 minutes of N). Call 2 runs the stages call 1 failed or did not reach, then its own
#   (the performance benchmarks of the layer stage, then transformers, until its deadline).
#
#   tests/run_gpu.sh [--out DIR] [--deadline SECONDS] [STAGE ...]   any stages, in this order
#   tests/run_gpu.sh pack [--fast] [FILE]                            the bundle (below)
#   tests/run_gpu.sh --list
#
# Stages (time box in seconds; what each took in the first window, an H200 on 2026-11-28):
#   call 1, deadline 400 s (the first window's took 175 s):
#   env        20  (8 s) the GPU, driver, compute mode, the libcudart/libnccl each binary resolves
#                  (path and version), the libcublas momoe opens at run time (momoe-bench env),
#                  torch and nvcc; stops the call when a library a binary needs does not resolve
#   kernels   110  (32 s) every op against its CPU reference (cuda_kernels_test: each op's error
#                  is printed as it is recorded; a failing test is rerun alone in its own
#                  process, so a sticky CUDA error cannot hide which op broke),
#                  phase_timer_gpu_test and stream_graph_gpu_test (CUDA graphs of a stream)
#   nccl       30  (3 s) the NCCL backend at one rank (comm_nccl_test, NCCL_DEBUG=WARN)
#   model     180  (39 s) the whole model, every config family and Mixtral's, Qwen2-MoE's and
#                  Qwen3-MoE's presets, GPU against CPU: FP32 20 steps (routing counted, flips
#                  and their first step stated), BF16 100 steps (the fused attention, the
#                  default; again with gemm-bf16 and gemm for two families), repeat runs, checkpoints
#                  across devices, one sync per step, CUDA graph steps against eager ones, each
#                  step's allocator peak against the memory estimate (gpu_training_test)
#   memcheck   70  (7 s) compute-sanitizer memcheck on the kernel tests
#   smoke      60  (19 s) training tokens/s on the GPU (momoe-bench train, FP32 and BF16), a
#                  40-step momoe-train run whose checkpoint momoe-eval scores on the GPU and on
#                  the CPU (each against the float64 PyTorch module on its own routing
#                  decisions, and the two runs' decisions compared), and the cuBLAS bf16 GEMM
#                  rate (through PyTorch)
#   mpi        90  (11 s) 2 and 4 MPI ranks sharing the GPU equal to one rank
#                  (parallel_trainer_mpi_test, OpenMPI set as ctest sets it; `mpirun -np 2
#                  true` first)
#   initcheck  60  (2 s) compute-sanitizer initcheck on two training steps of a tiny model
#   synccheck  70  (5 s) compute-sanitizer synccheck on the kernel tests
#   racecheck 100  (47 s) compute-sanitizer racecheck on the kernel tests
#   call 2, after call 1's failed and unreached stages:
#   layer     370  (272 s in the second window, before this order) first BF16 training
#                  tokens/s under the defaults (fused attention, one cuBLAS call per expert
#                  block): the presets eagerly, with each phase's device time (forward,
#                  backward, optimizer), and under train.cuda_graphs (no replay: once more with
#                  MOMOE_CUDA_GRAPH_CAPTURE=relaxed, to tell a call a recording cannot hold),
#                  gpu-large's MFU; then momoe's MoE layer against PyTorch's grouped-GEMM layer
#                  (momoe-bench layer --device cuda --shape 1..4 --torch 1; each line also
#                  times the layer's expert GEMMs alone); then, while the box has room, one
#                  gpu-large training step's time per kernel under ncu ->
#                  train_profile_gpu_large.csv and shape 1's -> layer_profile_shape1.csv; the
#                  papers' variants against the plain layer (--compare variants), gpu-large's
#                  MoE layer and attention core (fused and gemm-bf16), shape 2 with the grouped
#                  cuBLAS call (MOMOE_EXPERT_GEMM=grouped), shape 2's ncu profile ->
#                  layer_profile.csv (all in results.tgz; lines in layer.jsonl)
#   transformers 150 (113-120 s) the machine's own transformers (python3's; none is installed)
#                  loads momoe's Mixtral, Qwen2-MoE and Qwen3-MoE exports
#                  (transformers_export_test on the GPU: 12 steps and momoe-eval with
#                  --routing-out on the GPU, momoe-export), and tests/launcher/
#                  transformers_check.py --device cuda compares it with momoe-eval in float64
#                  (a rope_theta of 5000 must fail that) and in bfloat16 (routed on
#                  momoe-eval's decisions: decisions differing, |ln ratio| against
#                  (eps_bf16 + eps32) x (depth + mean NLL))
#   only when named:
#   build     420  without a bundle: configure and build BUILD_DIR (default build-gpu)
#
# Results: OUT holds three files, rewritten after every stage (a call killed at its limit still
# returns what finished): summary.txt (one line per stage: verdict, seconds, key numbers),
# digest.txt (each failed stage's first failure with its context; ops past their bound) and
# results.tgz (every log, XML report and JSON line). Scratch (the unpacked bundle, runs) goes to
# $MOMOE_GPU_WORK (default $TMPDIR/momoe-gpu-work-<uid>).
#
# With a bundle (a GPU machine) MOMOE_REQUIRE_GPU defaults to 1: no GPU found fails every GPU
# stage, never passes. Without one (a developer's CPU machine) stages after env are "skipped (no
# GPU)" unless MOMOE_REQUIRE_GPU=1. MOMOE_GPUS=N overrides the GPU count (practising on a CPU
# machine), and MOMOE_MPI_DEVICE=CPU runs the mpi stage's ranks on the CPU (the bundle's OpenMPI
# checked without a GPU). Exit status: 0 when every stage run passed, 1 otherwise, 2 for usage.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SELF="$ROOT/tests/run_gpu.sh"
CALL1_STAGES="env kernels nccl model memcheck smoke mpi initcheck synccheck racecheck"
CALL2_STAGES="layer transformers"
ORDER="env build kernels nccl model memcheck smoke mpi initcheck synccheck racecheck layer transformers"
declare -A BOX=([env]=20 [build]=420 [kernels]=110 [nccl]=30 [model]=180 [memcheck]=70
                [smoke]=60 [mpi]=90 [transformers]=150 [initcheck]=60 [synccheck]=70
                [racecheck]=100 [layer]=370)
BUNDLE=${BUNDLE:-$ROOT/gpu-bundle.tar.xz}
KERNEL_FILTER='CudaKernelTest.*:-*RepeatedRuns*:*LargeShapes*'  # sanitizers: small cases
BINARIES=(tests/kernels/cuda_kernels_test tests/base/phase_timer_gpu_test
          tests/base/stream_graph_gpu_test tests/comm/comm_nccl_test
          tests/core/gpu_training_test tests/core/parallel_trainer_mpi_test launcher/momoe-train
          launcher/momoe-eval launcher/momoe-export launcher/momoe-data benchmarks/momoe-bench)
ORIG_LD_LIBRARY_PATH=${ORIG_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}  # python runs with this
export ORIG_LD_LIBRARY_PATH

die() { echo "run_gpu.sh: $*" >&2; exit 2; }
# Python as the machine has it (the bundle's libraries are not torch's).
py() { LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH python3 "$@"; }

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
  local level=-6
  if [ "${1:-}" = --fast ]; then level=-0; shift; fi
  local out=${1:-$BUNDLE}
  local build=${BUILD_DIR:-build}
  case $build in /*) ;; *) build=$ROOT/$build ;; esac
  local cache=$build/CMakeCache.txt
  [ -f "$cache" ] || die "pack: $build is not a build directory (run scripts/build.sh first)"
  grep -q '^MOE_WITH_CUDA:BOOL=ON' "$cache" || die "pack: $build was configured without CUDA"
  # The device code the kernels were compiled for (nvcc's flags, from the makefiles or Ninja's
  # build file; this machine has no cuobjdump).
  local arch flags=$build/kernels/cuda/CMakeFiles/moe_kernels_cuda.dir/flags.make
  [ -f "$flags" ] || flags=$build/build.ninja
  arch=$(grep -o 'generate-code=arch=[^ ]*' "$flags" | sed 's/.*code=\[*//; s/\]//' | sort -u |
         tr '\n' ' ')
  [[ "$arch" == *sm_90* ]] ||
    die "pack: $build builds CUDA code for '$arch', not sm_90 (reconfigure with -DCMAKE_CUDA_ARCHITECTURES=90)"
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  mkdir -p "$tmp/bin" "$tmp/lib"
  local b
  for b in "${BINARIES[@]}"; do
    [ -x "$build/$b" ] || die "pack: $build/$b is missing (build every target first)"
    cp "$build/$b" "$tmp/bin/"
  done
  copy_deps "$tmp/lib" "$tmp"/bin/*
  # The CPU reference's BLAS is loaded at run time (kernels/cpu/blas_library.h).
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
    mapfile -t mpi_libs < <(find "$tmp/mpi" -name '*.so' -type f)
    copy_deps "$tmp/lib" "$tmp/mpi/usr/bin/mpirun" "$tmp/mpi/usr/bin/orted" "${mpi_libs[@]}"
  fi
  {
    echo "source_rev $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo '+dirty')"
    echo "packed_at $(date -u +%FT%TZ) on $(hostname)"
    echo "cuda_architectures $arch"
    echo "build_type $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")"
    echo "binaries ${BINARIES[*]}"
  } > "$tmp/MANIFEST"
  case $out in /*) ;; *) out=$PWD/$out ;; esac
  XZ_OPT="$level -T0" tar -C "$tmp" -cJf "$out" . || die "pack: tar failed"
  echo "run_gpu.sh: packed $(ls "$tmp/bin" | wc -l) binaries and $(ls "$tmp/lib" | wc -l) libraries" \
       "into $out ($(du -h "$out" | cut -f1)); carry it and run tests/run_gpu.sh call1 on the GPU machine"
}

# unpack BUNDLE DIR: with xz, or with Python's tarfile where the image has no xz.
unpack() {
  if command -v xz > /dev/null; then
    tar -C "$2" -xJf "$1"
  else
    echo "run_gpu.sh: no xz on this machine: unpacking with Python's tarfile" >&2
    py -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' "$1" "$2"
  fi
}

# ---------------------------------------------------------------------------------------------
# The stages (each runs in its own process under `timeout`, writing RESULTS/<stage>.log; a stage
# may write RESULTS/<stage>.key, one line of key numbers for the summary, and
# RESULTS/<stage>.digest, its own digest entry)

gtest() {  # gtest BINARY [ARGS]: a test binary, its XML report beside the log
  local bin=$1; shift
  "$BIN/$bin" --gtest_output="xml:$RESULTS/$bin.xml" "$@"
}

key() { echo "$*" >> "$RESULTS/$STAGE.key"; }

sanitizer() {  # sanitizer TOOL: compute-sanitizer TOOL on the kernel tests
  command -v compute-sanitizer > /dev/null ||
    { echo "compute-sanitizer is not on PATH: the sanitizer stages cannot run"; return 1; }
  compute-sanitizer --tool "$1" --error-exitcode 1 --print-limit 20 "$BIN/cuda_kernels_test" \
    --gtest_filter="$KERNEL_FILTER" 2>&1 | tee "$RESULTS/$1.out"
  local rc=${PIPESTATUS[0]}
  key "$(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$RESULTS/$1.out" || echo 'no SUMMARY line')"
  return "$rc"
}

# The library each binary resolves for a name (path -> real file), or "NOT FOUND".
resolved() {  # resolved BINARY PATTERN
  local line
  line=$(ldd "$1" 2>/dev/null | grep -m1 "$2")
  [ -z "$line" ] && return 0
  case $line in *"not found"*) echo "NOT FOUND ($line)"; return 0 ;; esac
  local path
  path=$(echo "$line" | awk '{print $3}')
  echo "$path -> $(readlink -f "$path")"
}

stage_env() {
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-); cores: $(nproc)"
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,compute_mode --format=csv
    key "$(nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader | head -1)"
  else
    echo "nvidia-smi: not found"
    key "nvidia-smi not found"
  fi
  command -v nvcc > /dev/null && nvcc --version | tail -2
  command -v compute-sanitizer > /dev/null && compute-sanitizer --version | head -2 ||
    echo "compute-sanitizer: not found"
  echo "torch: $(py -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1)"
  echo "binaries: $BIN"
  [ -f "$BIN/../MANIFEST" ] && cat "$BIN/../MANIFEST"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  local b missing_any=""
  for b in "$BIN"/*; do
    [ -x "$b" ] || continue
    local missing
    missing=$(ldd "$b" 2>/dev/null | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    echo "$(basename "$b"): ${missing:+MISSING $missing}${missing:-libraries found}"
    [ -n "$missing" ] && missing_any="$missing_any $(basename "$b"): $missing;"
  done
  local lib
  for lib in libcudart libnccl; do
    for b in cuda_kernels_test comm_nccl_test; do
      [ -x "$BIN/$b" ] || continue
      local r
      r=$(resolved "$BIN/$b" "$lib")
      [ -n "$r" ] && { echo "$lib ($b): $r"; break; }
    done
  done
  command -v cuobjdump > /dev/null && [ -x "$BIN/cuda_kernels_test" ] &&
    echo "device code in cuda_kernels_test: $(cuobjdump --list-elf "$BIN/cuda_kernels_test" 2>/dev/null |
      grep -o 'sm_[0-9a-z]*' | sort -u | tr '\n' ' ')"
  # cuBLAS is not linked but opened at run time (base/cublas_library.h): momoe-bench env names
  # the file it loads, or why it cannot.
  local env_line
  env_line=$("$BIN/momoe-bench" env 2>&1 | head -3)
  echo "$env_line"
  case $env_line in
    *'"cublas": "/'*) ;;
    *) missing_any="$missing_any momoe-bench env: no cuBLAS;" ;;
  esac
  if [ -n "$missing_any" ]; then
    echo "a library the binaries need does not resolve:$missing_any the call stops here"
    key "MISSING:$missing_any"
    return 3
  fi
  key "libraries resolve"
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
  local rc=$? failed
  failed=$(sed -n 's/^\[  FAILED  \] \([A-Za-z0-9_/.]*\)\( (.*)\)\{0,1\}$/\1/p' "$RESULTS/kernels.log" | sort -u)
  local over
  over=$(grep -c '^\[ op \].* OVER' "$RESULTS/kernels.log")
  if [ -n "$failed" ]; then
    # One sticky CUDA error fails every later test of the process: each failed test alone.
    local t alone=0 still=0
    echo "== the failed tests again, one process each"
    for t in $failed; do
      if "$BIN/cuda_kernels_test" --gtest_filter="$t" > "$RESULTS/rerun-$t.log" 2>&1; then
        echo "rerun alone: $t: passed (it failed only after an earlier error in the process)"
        alone=$((alone + 1))
      else
        echo "rerun alone: $t: FAILED"; grep -m3 -A3 'Failure' "$RESULTS/rerun-$t.log"
        still=$((still + 1))
      fi
    done
    key "$(echo "$failed" | wc -l) test(s) failed; alone: $still still fail, $alone pass"
  fi
  key "ops past their bound: $over"
  gtest phase_timer_gpu_test || rc=1
  gtest stream_graph_gpu_test || rc=1
  return $rc
}

stage_nccl() { NCCL_DEBUG=WARN gtest comm_nccl_test; }

stage_model() {
  gtest gpu_training_test
  local rc=$?
  grep '^\[ gpu \]' "$RESULTS/model.log" > "$RESULTS/model_report.txt"
  key "$(grep -c 'FP32' "$RESULTS/model_report.txt") FP32 families, worst per-step" \
      "$(sed -n 's/.*FP32: worst per-step |gpu - cpu| \/ cpu = \([0-9.e+-]*\).*/\1/p' \
         "$RESULTS/model_report.txt" | sort -g | tail -1)," \
      "$(sed -n 's/.*FP32.*routing: \([0-9]*\) token.*/\1/p' "$RESULTS/model_report.txt" |
         awk '{s += $1} END {print s + 0}') tokens moved"
  return $rc
}

stage_memcheck() { sanitizer memcheck; }
stage_synccheck() { sanitizer synccheck; }
stage_racecheck() { sanitizer racecheck; }

stage_smoke() {
  local rc=0 precision
  for precision in FP32 BF16; do
    "$BIN/momoe-bench" train --device cuda --precision "$precision" --preset all --steps 5 \
      --warmup 2 --config "$ROOT/configs/quickstart.pbtxt" | tee -a "$RESULTS/smoke.jsonl" || rc=1
  done
  key "tokens/s: $(py - "$RESULTS/smoke.jsonl" 2>/dev/null <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("bench") == "train":
        print("%s %s %.0f;" % (j["preset"], j["precision"], j["tokens_per_second"]), end=" ")
EOF
)"
  # A real run through momoe-train (no probe, no final evaluation: throughput and a checkpoint).
  local run=$WORK/smoke-run
  "$BIN/momoe-train" --config "$ROOT/configs/quickstart.pbtxt" --run-dir "$run" --fresh \
    --set train.device=CUDA --set train.steps=40 --set train.eval_every=0 \
    --set train.probe_every=0 --set train.final_eval=NONE --set train.checkpoint_every=40 || rc=1
  # Its checkpoint scored on the GPU and on the CPU, each against the float64 PyTorch module on
  # its own routing decisions (the cross-path rule), and the two runs' decisions compared.
  local ckpt=$run/ckpt-00000040 text=$ROOT/data/brown/valid.txt.gz dev
  for dev in cuda cpu; do
    "$BIN/momoe-eval" --checkpoint "$ckpt" --text "$text" --max-sequences 40 --attack-rate 0 \
      --device "$dev" --routing-out "$WORK/$dev.routing" > "$WORK/$dev.eval" || rc=1
    cat "$WORK/$dev.eval"
  done
  rm -rf "$WORK/smoke.export" "$WORK/smoke.tokens"
  "$BIN/momoe-export" --checkpoint "$ckpt" --out "$WORK/smoke.export" > /dev/null &&
    "$BIN/momoe-data" prepare --out "$WORK/smoke.tokens" --train "$text" \
      --vocab "$WORK/smoke.export/vocab.txt" --quiet > /dev/null || rc=1
  py - "$WORK" > "$WORK/jobs.json" <<'EOF' || rc=1
import json, sys
w = sys.argv[1]
print(json.dumps([{"key": f"smoke {d}", "name": d, "export": f"{w}/smoke.export", "batch": 16,
                   "dataset": f"{w}/smoke.tokens", "routing": f"{w}/{d}.routing",
                   "eval": f"{w}/{d}.eval", "expect": "pass", "what": ""} for d in ("cuda", "cpu")]))
EOF
  py "$ROOT/tests/launcher/export_reference.py" "$ROOT/python" "$WORK/jobs.json" \
    "$RESULTS/smoke_eval.json" 2>&1 | tee "$RESULTS/smoke_eval.txt" || rc=1
  py - "$WORK" "$ROOT" <<'EOF' | tee -a "$RESULTS/smoke_eval.txt" || rc=1
import json, sys
w = sys.argv[1]
sys.path.insert(0, sys.argv[2] + "/python/momoe_torch")
from safetensors_numpy import read_safetensors  # numpy only
g, c = (read_safetensors(f"{w}/{d}.routing")[0] for d in ("cuda", "cpu"))
flips = sum(int((g[k] != c[k]).reshape(g[k].shape[0], -1).any(axis=1).sum()) for k in g if k.endswith(".experts"))
ge, ce = (json.load(open(f"{w}/{d}.eval")) for d in ("cuda", "cpu"))
print(f"GPU against CPU momoe-eval: ppl {ge['ppl']:.9g} vs {ce['ppl']:.9g} (relative "
      f"{abs(ge['ppl'] - ce['ppl']) / ce['ppl']:.2e}); {flips} token-layer routing decisions differ")
EOF
  key "$(grep -m1 'GPU against CPU' "$RESULTS/smoke_eval.txt")"
  # The cuBLAS bf16 GEMM rate on this GPU (PyTorch's matmul calls cuBLAS): MFU's denominator.
  py - <<'EOF' | tee -a "$RESULTS/smoke.jsonl" || rc=1
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

# room SECONDS WHAT: whether the stage's box (STAGE_BOX; SECONDS counts the stage's own time)
# leaves SECONDS and a margin; if not, says that WHAT is left out. A stage cut at its box counts
# as failed; a part left out does not.
room() {
  local left=$(( ${STAGE_BOX:-100000} - SECONDS ))
  [ "$left" -ge $(( $1 + 15 )) ] && return 0
  echo "layer: no time left for $2 ($left s of the stage's box)"
  return 1
}

# profile LIMIT NAME COMMAND...: Nsight Compute's duration per kernel of COMMAND into
# RESULTS/NAME.csv (its largest kernels in the stage's key line: benchmarks/ncu_summary.py),
# when the stage's box leaves LIMIT seconds (room).
profile() {
  local limit=$1 name=$2
  shift 2
  room "$limit" "the $name profile" || return 0
  if timeout "$limit" ncu --metrics gpu__time_duration.sum --print-summary per-kernel --csv "$@" \
      > "$RESULTS/$name.csv" 2> "$RESULTS/$name.log"; then
    # Its largest kernels in the key line (summary.txt), the whole table in results.tgz.
    key "$name: $(py "$ROOT/benchmarks/ncu_summary.py" --top 8 "$RESULTS/$name.csv" 2>&1)"
  else
    echo "layer: the $name profile failed (see $name.log in results.tgz)"
  fi
}

# The layer and attention lines of layer.jsonl from line FIRST on, in one line (the key).
summarize_layers() {
  py - "$RESULTS/layer.jsonl" "$1" 2>/dev/null <<'EOF'
import json, sys
for line in open(sys.argv[1]).readlines()[int(sys.argv[2]) - 1:]:
    try:
        j = json.loads(line)
    except ValueError:
        continue  # a library's stray line among the results
    if j.get("bench") == "layer":
        torch = ""
        if "speedup_vs_torch" in j:
            torch = " torch %.2f ms: %.2fx" % (j["torch_fwd_bwd_ms"], j["speedup_vs_torch"])
        variant = "" if j.get("variant") == "plain" else " " + j.get("variant", "?")
        gemms = ""
        if j.get("expert_gemms_ms", -1) > 0:
            gemms = ", gemms %.2f" % j["expert_gemms_ms"]
        if j.get("dispatch_copy_share", -1) > 0:
            gemms += ", dispatch %.0f%% combine %.0f%% of copy" % (
                100 * j["dispatch_copy_share"], 100 * j["combine_copy_share"])
        print("T%d D%d F%d E%d K%d%s %s %.2f ms (fwd %.2f, bwd %.2f%s)%s;" % (
            j["tokens"], j["d"], j["f"], j["experts"], j["top_k"], variant, j.get("expert_gemm"),
            j["fwd_bwd_ms"], j.get("fwd_ms", -1), j.get("bwd_ms", -1), gemms, torch), end=" ")
    elif j.get("bench") == "layer_compare" and j.get("compare") == "variants":
        print("variants over plain: %s;" % ", ".join(
            "%s %+.1f%%" % (k[:-len("_overhead")], 100 * v) for k, v in j.items()
            if k.endswith("_overhead")), end=" ")
    elif j.get("bench") == "attention":
        print("attention %s S%d Dh%d fwd %.2f bwd %.2f ms;" % (
            j.get("attention"), j.get("seq", -1), j.get("head_dim", -1),
            j.get("forward_ms", -1), j.get("backward_ms", -1)), end=" ")
EOF
}

# Whole BF16 training steps under the defaults (the fused attention, expert products one cuBLAS
# call per block): the quick start and smoe-medium ("all": heads of 32 over one tile of 64
# positions; heads of 44, padded to 64, over 512) and the model that fills the GPU (gpu-large: 12
# MoE blocks of width 1024, sequences of 1024, 0.90 G parameters; its MFU against the measured
# GEMM rate is the issue's 40%), eagerly (each phase's device time: forward, backward,
# optimizer) and under train.cuda_graphs (the timed steps are replays: "graph_replays"; none:
# once more with MOMOE_CUDA_GRAPH_CAPTURE=relaxed, to tell a call a recording cannot hold).
layer_training() {
  local rc=0 run preset graphs
  for run in "all 0" "all 1" "gpu-large 0" "gpu-large 1"; do
    read -r preset graphs <<< "$run"
    "$BIN/momoe-bench" train --device cuda --precision BF16 --preset "$preset" --steps 4 \
      --warmup 2 --cuda-graphs "$graphs" --config "$ROOT/configs/quickstart.pbtxt" |
      tee "$RESULTS/train_run.jsonl" || rc=1
    cat "$RESULTS/train_run.jsonl" >> "$RESULTS/layer.jsonl"
    if [ "$graphs" = 1 ] && grep -q '"graph_replays": 0' "$RESULTS/train_run.jsonl"; then
      MOMOE_CUDA_GRAPH_CAPTURE=relaxed "$BIN/momoe-bench" train --device cuda --precision BF16 \
        --preset "$preset" --steps 4 --warmup 2 --cuda-graphs 1 \
        --config "$ROOT/configs/quickstart.pbtxt" | tee -a "$RESULTS/layer.jsonl" || rc=1
    fi
  done
  rm -f "$RESULTS/train_run.jsonl"
  key "BF16 training: $(py - "$RESULTS/layer.jsonl" 2>/dev/null <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except ValueError:
        continue  # a library's stray line among the results
    if j.get("bench") == "train":
        graphs = {"off": ""}.get(j.get("graph_capture", "off"), " graphs")
        if j.get("graph_capture") == "relaxed":
            graphs = " graphs (relaxed capture)"
        phases = ""
        if j.get("forward_ms", -1) > 0:
            phases = " (fwd %.1f, bwd %.1f, opt %.1f ms)" % (
                j["forward_ms"], j["backward_ms"], j.get("optimizer_ms", -1))
        print("%s %s%s %.0f tok/s MFU %.1f%%%s;" % (
            j.get("preset"), j.get("attention"), graphs, j.get("tokens_per_second", 0),
            100 * j.get("mfu", -1), phases), end=" ")
EOF
)"
  return $rc
}

stage_layer() {
  local rc=0 shape first attention
  # First what tells most per minute (a call cut short keeps what finished): whole training
  # steps, then momoe's MoE layer against PyTorch's, then the profiles, then the rest.
  layer_training || rc=1
  export MOMOE_PYTHON=${MOMOE_PYTHON:-$(command -v python3)}
  export MOMOE_TORCH_REFERENCE=$ROOT/benchmarks/torch_moe_reference.py
  LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH "$MOMOE_PYTHON" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"
assert hasattr(torch, "_grouped_mm"), "torch %s has no _grouped_mm" % torch.__version__' || return 1
  # The reference's check with many empty experts (16 tokens, 64 experts), grouped and loop.
  LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH "$MOMOE_PYTHON" "$MOMOE_TORCH_REFERENCE" layer \
    --device cuda --tokens 16 --d 64 --f 128 --experts 64 --top-k 2 --check --iterations 1 \
    --warmup 0 | tee -a "$RESULTS/layer.jsonl" || return 1
  # The issue's four shapes against PyTorch's torch._grouped_mm layer in the same run; each
  # line also times the layer's expert GEMMs alone ("expert_gemms_ms": the rest of the layer's
  # time is routing, dispatch, activations, biases and combine).
  first=$(($(wc -l < "$RESULTS/layer.jsonl") + 1))
  for shape in 1 2 3 4; do
    "$BIN/momoe-bench" layer --device cuda --shape "$shape" --torch 1 | tee -a "$RESULTS/layer.jsonl" ||
      rc=1
  done
  key "layers against PyTorch: $(summarize_layers "$first")"
  # Where the time goes, kernel by kernel, while the stage's box has room (a profile that cannot
  # run, no ncu or no counter permission, or finds no time left is reported, not failed): one
  # eager gpu-large training step (its initialisation is listed too: the step's kernels are the
  # MoE and attention ones with 12 or 24 invocations, and the rest by name), then shape 1's
  # forward + backward (the check pass and one timed pass, no warm-up, no forward alone, plus
  # the floors' own GEMMs and copy).
  if command -v ncu > /dev/null; then
    profile 150 train_profile_gpu_large "$BIN/momoe-bench" train --device cuda --precision BF16 \
      --preset gpu-large --steps 1 --warmup 0 --cuda-graphs 0 --config "$ROOT/configs/quickstart.pbtxt"
    profile 100 layer_profile_shape1 "$BIN/momoe-bench" layer --device cuda --shape 1 \
      --iterations 1 --warmup 0 --forward-alone 0
  else
    echo "layer: no ncu on this machine: no per-kernel profile"
  fi
  first=$(($(wc -l < "$RESULTS/layer.jsonl") + 1))
  # Each of the rest while the box has room (what each took before, with a margin). The papers'
  # variants against the plain layer at shape 1 (the issue's target: each adds at most 3%;
  # SparseMixer against plain top 1): one line each, then the overheads.
  if room 45 "the variants"; then
    "$BIN/momoe-bench" layer --device cuda --shape 1 --compare variants --rounds 3 \
      --iterations 5 --warmup 1 | tee -a "$RESULTS/layer.jsonl" || rc=1
  fi
  # gpu-large's MoE layer alone (16,384 tokens of width 1024, 16 experts of 2048, top 2, in
  # capacity mode as that preset trains): its share of gpu-large's step, beside the attention
  # core's below (12 of each a step).
  if room 15 "gpu-large's MoE layer"; then
    "$BIN/momoe-bench" layer --device cuda --dtype bf16 --dropless 0 --tokens 16384 --d 1024 \
      --f 2048 --experts 16 --top-k 2 --iterations 10 --warmup 2 |
      tee -a "$RESULTS/layer.jsonl" || rc=1
  fi
  # The attention core alone at gpu-large's shape (16 sequences of 1024, 16 heads of 64): the
  # fused kernels (the default) and the GEMM path on bf16 operands; then shape 2 with the grouped
  # cuBLAS call (MOMOE_EXPERT_GEMM=grouped: slower than one call per block in the last window).
  for attention in fused gemm-bf16; do
    room 10 "the $attention attention core" || continue
    MOMOE_ATTENTION=$attention "$BIN/momoe-bench" attention --device cuda --batch 16 --heads 16 \
      --seq 1024 --head-dim 64 --iterations 10 --warmup 2 | tee -a "$RESULTS/layer.jsonl" || rc=1
  done
  if room 20 "shape 2 with the grouped call"; then
    MOMOE_EXPERT_GEMM=grouped "$BIN/momoe-bench" layer --device cuda --shape 2 |
      tee -a "$RESULTS/layer.jsonl" || rc=1
  fi
  key "more layers and attention: $(summarize_layers "$first")"
  if command -v ncu > /dev/null; then
    profile 100 layer_profile "$BIN/momoe-bench" layer --device cuda --shape 2 --iterations 1 \
      --warmup 0 --forward-alone 0
  fi
  return $rc
}

stage_initcheck() {
  command -v compute-sanitizer > /dev/null ||
    { echo "compute-sanitizer is not on PATH: the sanitizer stages cannot run"; return 1; }
  compute-sanitizer --tool initcheck --error-exitcode 1 --print-limit 20 "$BIN/momoe-train" \
    --config "$ROOT/tests/launcher/tiny_config.pbtxt" --run-dir "$WORK/initcheck-run" --fresh \
    --set train.device=CUDA --set train.steps=2 --set train.eval_every=0 \
    --set train.probe_every=0 --set train.final_eval=NONE --set train.checkpoint_every=0 2>&1 |
    tee "$RESULTS/initcheck.out"
  local rc=${PIPESTATUS[0]}
  key "$(grep -m1 'ERROR SUMMARY' "$RESULTS/initcheck.out" || echo 'no ERROR SUMMARY line')"
  return "$rc"
}

stage_mpi() {
  local mpirun
  mpirun=$(command -v mpirun || true)
  [ -n "$mpirun" ] || { echo "mpirun is not available (neither bundled nor installed)"; return 1; }
  [ -x "$BIN/parallel_trainer_mpi_test" ] || { echo "parallel_trainer_mpi_test was not built"; return 1; }
  # As ctest runs MPI tests (cmake/MoeTesting.cmake).
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OPENBLAS_NUM_THREADS=1 MOMOE_TEST_DEVICE=${MOMOE_MPI_DEVICE:-CUDA}
  command -v nvidia-smi > /dev/null &&
    echo "compute mode: $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)" \
         "(Exclusive_Process forbids ranks sharing the GPU)"
  echo "== $mpirun -np 2 true (does this OpenMPI start here at all?)"
  "$mpirun" --oversubscribe -np 2 true || { echo "mpirun cannot start two processes"; return 1; }
  local rc=0 np
  for np in 2 4; do
    echo "== mpirun -np $np, ranks on $MOMOE_TEST_DEVICE (sharing the GPU through the MPI backend)"
    "$mpirun" --oversubscribe -np "$np" -x MOMOE_TEST_DEVICE -x MOMOE_SOURCE_DIR -x MOMOE_DATA_DIR \
      -x MOMOE_REQUIRE_GPU -x LD_LIBRARY_PATH -x OPENBLAS_NUM_THREADS \
      "$BIN/parallel_trainer_mpi_test" || rc=1
  done
  key "np 2 and 4 on $MOMOE_TEST_DEVICE: $([ $rc -eq 0 ] && echo passed || echo FAILED)"
  return $rc
}

# transformers_export_test on the GPU, with the machine's own transformers and torch (its python3:
# there is no package registry here to install a pinned release from): momoe's Mixtral, Qwen2-MoE
# and Qwen3-MoE (the CPU's transformers 4.46 has no Qwen3-MoE: its only transformers check is
# here) trained and scored on the GPU, exported, then loaded by transformers in float64 (the
# CPU test's check; a changed rope_theta must fail Mixtral's, so this release is seen to read
# config.json) and in bfloat16 (transformers' own GPU arithmetic, routed on momoe-eval's
# decisions; its bound is too loose to see rope_theta).
stage_transformers() {
  local versions
  versions=$(py -c 'import torch, transformers
print("transformers", transformers.__version__, "torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1) ||
    { echo "$versions"; echo "python3 cannot import transformers and torch: this machine has no" \
        "package registry to install them from, so the transformers stage cannot run"
      key "transformers missing"; return 1; }
  echo "$versions"
  local run=$WORK/transformers text=$ROOT/data/brown/valid.txt.gz name
  rm -rf "$run" && mkdir -p "$run" || return 1
  local model
  for model in mixtral:MixtralForCausalLM qwen2-moe:Qwen2MoeForCausalLM \
               qwen3-moe:Qwen3MoeForCausalLM; do
    transformers_model "${model%%:*}" "$run" "$text" "${model#*:}" || return 1
  done
  "$BIN/momoe-data" prepare --out "$run/tokens" --train "$text" \
    --vocab "$run/mixtral.export/vocab.txt" --quiet > /dev/null || return 1
  cp -r "$run/mixtral.export" "$run/perturbed" &&
    py - "$run/perturbed/transformers/config.json" <<'PY' || return 1
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_theta"] = 5000.0
json.dump(c, open(sys.argv[1], "w"))
PY
  local rc=0 job check arch
  # perturbed: float64 on the rope_theta 5000 copy of Mixtral's export.
  for job in mixtral:float64:MixtralForCausalLM mixtral:perturbed:MixtralForCausalLM \
             mixtral:bfloat16:MixtralForCausalLM qwen2-moe:float64:Qwen2MoeForCausalLM \
             qwen2-moe:bfloat16:Qwen2MoeForCausalLM qwen3-moe:float64:Qwen3MoeForCausalLM \
             qwen3-moe:bfloat16:Qwen3MoeForCausalLM; do
    IFS=: read -r name check arch <<< "$job"
    transformers_job "$run" "$name" "$check" "$arch" || rc=1
  done
  key "$versions"
  return $rc
}

# transformers_model NAME RUN TEXT ARCH: configs/modern/NAME.pbtxt trained 12 steps and scored on
# the GPU with its routing decisions (RUN/NAME.routing, RUN/NAME.eval), exported to
# RUN/NAME.export, which must hold transformers' ARCH layout.
transformers_model() {
  local name=$1 run=$2 text=$3 arch=$4
  echo "== momoe-train configs/modern/$name.pbtxt on the GPU (transformers_export_test's 12 steps)"
  "$BIN/momoe-train" --config "$ROOT/configs/modern/$name.pbtxt" --run-dir "$run/$name" \
    --set train.device=CUDA --set train.steps=12 --set train.checkpoint_every=12 \
    --set train.optimizer.lr=4e-3 --set train.schedule.warmup_steps=0 --set model.init_std=0.05 \
    --set train.final_eval=NONE --set train.eval_every=0 --set data.cache_dir="$run/cache" || return 1
  local ckpt=$run/$name/ckpt-00000012
  echo "== momoe-eval on the GPU with its routing decisions; the export"
  "$BIN/momoe-eval" --checkpoint "$ckpt" --text "$text" --max-sequences 40 --attack-rate 0 \
    --device cuda --routing-out "$run/$name.routing" > "$run/$name.eval" || return 1
  cat "$run/$name.eval"
  "$BIN/momoe-export" --checkpoint "$ckpt" --out "$run/$name.export" | tee "$run/$name.export.log" ||
    return 1
  grep -q "transformers' $arch layout" "$run/$name.export.log" && return 0
  echo "momoe-export wrote no $arch layout for configs/modern/$name.pbtxt" |
    tee -a "$RESULTS/transformers.digest"
  key "$name: no $arch layout"
  return 1
}

# transformers_job RUN NAME CHECK ARCH: transformers_check.py on NAME's export, which transformers
# must build as ARCH (CHECK float64 or bfloat16; perturbed: float64 on RUN/perturbed, which must
# fail by the comparison's verdict).
transformers_job() {
  local run=$1 name=$2 check=$3 arch=$4
  local dir=$run/$name.export dtype=$check out=$RESULTS/transformers_${name}_$check.txt
  [ "$check" = perturbed ] && dir=$run/perturbed dtype=float64
  echo "== transformers_check.py --device cuda --dtype $dtype ($name, $(basename "$dir"))"
  py "$ROOT/tests/launcher/transformers_check.py" "$ROOT/python" "$dir" "$run/tokens" \
    "$run/$name.routing" "$run/$name.eval" "$arch" --device cuda --dtype "$dtype" > "$out" 2>&1
  local code=$?
  if [ "$check" = perturbed ]; then
    # Must fail, and by the comparison's verdict (not a crash, a missing device or a timeout).
    # Its expected FAIL line stays out of the stage log, where the digest would take it for the
    # stage's failure; the whole output is in transformers_mixtral_perturbed.txt.
    local verdict=
    verdict=$(grep -m1 -E "^FAIL: transformers( against momoe-eval|' routing differs)" "$out")
    echo "rope_theta 5000: exit $code, verdict: ${verdict:-none}"
    key "rope_theta 5000 $([ -n "$verdict" ] && echo caught || echo 'NOT caught')"
    [ -n "$verdict" ] && return 0
    echo "rope_theta 10000 -> 5000 was not caught by the float64 comparison (exit $code): this" \
         "transformers does not read rope_theta from config.json, the check cannot see it," \
         "or the check did not run to its verdict" | tee -a "$out"
  else
    cat "$out"
    key "$name $dtype $([ $code -eq 0 ] && echo passed || echo FAILED):" "$(sed -n \
        -e 's/^transformers: decisions: .* tokens, \([0-9]*\) differ.*/\1 decisions differ,/p' \
        -e 's/^transformers: \([0-9]*\) tokens routed differently.*/\1 decisions differ,/p' \
        -e 's/.*: |ln ratio| \([^ ]*\) <= \([^ ]*\) .*/|ln ratio| \1 <= \2/p' "$out" | tail -2 | paste -sd' ')"
    [ $code -eq 0 ] && return 0
  fi
  { echo "transformers_check.py --dtype $dtype on $name ($(basename "$dir")):"; tail -12 "$out"; } \
    >> "$RESULTS/transformers.digest"
  return 1
}

# ---------------------------------------------------------------------------------------------
# Summary, digest and the results archive (rewritten after every stage)

write_digest() {
  local d=$OUT/digest.txt s
  {
    echo "digest of $(basename "$OUT") at $(date -u +%FT%TZ), $(( $(date +%s) - START )) s in:" \
         "$(printf '%s\n' "${VERDICT[@]}" | grep -cvE '^(passed|skipped)') stage(s) not passed"
    for s in "${RAN[@]}"; do
      local verdict=${VERDICT[$s]}
      case $verdict in passed|skipped*) continue ;; esac
      echo
      echo "== $s: $verdict"
      if [ -f "$RESULTS/$s.digest" ]; then cat "$RESULTS/$s.digest"; continue; fi
      local log=$RESULTS/$s.log
      [ -f "$log" ] || { echo "(no log)"; continue; }
      grep '^\[ op \].* OVER' "$log" | head -20
      grep -E '^rerun alone:' "$log" | head -12
      # Every failed test of the stage by name (the context below is the first one's only).
      local failed
      failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | sed 's/ ([0-9]* ms)$//; s/, where .*//' |
               sort -u | head -20)
      [ -n "$failed" ] && echo "failed tests:" && echo "$failed"
      local at
      at=$(grep -n -m1 -E 'Failure$|^\[  FAILED  \]|ERROR SUMMARY: [1-9]|========= (Invalid|Race|Error|Uninitialized|Barrier|Program hit)|MISSING|not available|cannot|FAIL' "$log" | cut -d: -f1)
      if [ -n "$at" ]; then
        sed -n "$((at > 3 ? at - 3 : 1)),$((at + 15))p" "$log"
      else
        tail -20 "$log"
      fi
    done
  } > "$d.tmp" && mv "$d.tmp" "$d"
}

keys_of() {  # keys_of STAGE: the stage's key numbers on one line ("; " between them)
  [ -f "$RESULTS/$1.key" ] && paste -sd';' "$RESULTS/$1.key" | sed 's/;/; /g'
}

write_summary() {
  local s
  {
    printf '%-12s %-26s %7s  %s\n' stage verdict seconds "key numbers"
    for s in "${RAN[@]}"; do
      printf '%-12s %-26s %7s  %s\n' "$s" "${VERDICT[$s]}" "${SECS[$s]}" "$(keys_of "$s")"
    done
  } > "$OUT/summary.txt.tmp" && mv "$OUT/summary.txt.tmp" "$OUT/summary.txt"
}

write_results() {
  write_summary
  write_digest
  tar -C "$WORK" -czf "$OUT/results.tgz.tmp" results && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"
}

# ---------------------------------------------------------------------------------------------
# Driver

MODE=""
case "${1:-}" in
  pack) shift; pack "$@"; exit $? ;;
  --list)
    for s in $ORDER; do
      where="only when named"
      [[ " $CALL1_STAGES " == *" $s "* ]] && where="call 1"
      [[ " $CALL2_STAGES " == *" $s "* ]] && where="call 2"
      printf '%-12s %4s s  (%s)\n' "$s" "${BOX[$s]}" "$where"
    done
    exit 0 ;;
  --run-stage) STAGE=$2; export STAGE; "stage_$2"; exit $? ;;  # internal: one stage
  call1|call2) MODE=$1; shift ;;
esac

OUT=${OUT:-$ROOT/gpu-results}
DEADLINE=""
SECONDS_LEFT=""
COLD=0
AFTER=""
STAGES=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --deadline) DEADLINE=$2; shift 2 ;;
    --gpu-seconds-left) SECONDS_LEFT=$2; shift 2 ;;
    --cold) COLD=1; shift ;;
    --after) AFTER=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown flag $1 (see --help)" ;;
    *) [ -n "${BOX[$1]+x}" ] || die "unknown stage '$1' (stages: $ORDER)"; STAGES+=("$1"); shift ;;
  esac
done
case $MODE in
  call1)
    [ ${#STAGES[@]} -eq 0 ] || die "call1 runs its own stages ($CALL1_STAGES)"
    read -r -a STAGES <<< "$CALL1_STAGES"
    DEADLINE=${DEADLINE:-400} ;;
  call2)
    [ -n "$SECONDS_LEFT" ] || die "call2 needs --gpu-seconds-left N (the device status's budget_left_s)"
    # What is left after the machine's start (when cold) and 40 s for transfers and the close,
    # within one call's 10 minutes less a margin.
    DEADLINE=$((SECONDS_LEFT - 40 - COLD * 180))
    [ "$DEADLINE" -gt 540 ] && DEADLINE=540
    [ "$DEADLINE" -ge 60 ] ||
      die "call2: $SECONDS_LEFT s of GPU time left$([ $COLD = 1 ] && echo ' and a cold start') leaves a ${DEADLINE} s deadline: too little to run anything"
    again=""
    if [ -n "$AFTER" ]; then
      [ -f "$AFTER" ] || die "call2: --after $AFTER does not exist (copy call 1's summary.txt there)"
      # Call 1's stages that did not pass, or that have no line (a call killed at its limit).
      again=$(awk -v want="$CALL1_STAGES" 'BEGIN { n = split(want, w, " ") }
        NR > 1 { seen[$1] = 1; if ($1 != "env" && $2 != "passed") print $1 }
        END { for (i = 1; i <= n; i++) if (!(w[i] in seen) && w[i] != "env") print w[i] }' \
        "$AFTER" | tr '\n' ' ')
      echo "call 2 after $AFTER: again: ${again:-nothing}"
    fi
    STAGES=(env)
    for s in $ORDER; do
      [[ " $again $CALL2_STAGES " == *" $s "* ]] && [ "$s" != env ] && STAGES+=("$s")
    done ;;
  *)
    DEADLINE=${DEADLINE:-540}
    if [ ${#STAGES[@]} -eq 0 ]; then
      read -r -a STAGES <<< "$CALL1_STAGES $CALL2_STAGES"
    else  # the order above, env first when a stage needs the binaries checked
      ordered=()
      for s in $ORDER; do [[ " ${STAGES[*]} " == *" $s "* ]] && ordered+=("$s"); done
      STAGES=("${ordered[@]}")
    fi ;;
esac
mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT/summary.txt" "$OUT/digest.txt" "$OUT/results.tgz"
START=$(date +%s)

# Scratch outside OUT (on the GPU machine OUT is what comes back).
WORK=${MOMOE_GPU_WORK:-${TMPDIR:-/tmp}/momoe-gpu-work-$(id -u)}
mkdir -p "$WORK" || die "cannot create $WORK"
RESULTS=$WORK/results
rm -rf "$RESULTS" && mkdir -p "$RESULTS"
# The binaries: the bundle (unpacked into WORK once per bundle) or a build directory.
BUNDLE_DIR=""
if [ -f "$BUNDLE" ]; then
  BUNDLE_DIR=$WORK/bundle
  if [ ! -f "$BUNDLE_DIR/.unpacked" ] || [ "$BUNDLE" -nt "$BUNDLE_DIR/.unpacked" ]; then
    rm -rf "$BUNDLE_DIR" && mkdir -p "$BUNDLE_DIR" && unpack "$BUNDLE" "$BUNDLE_DIR" &&
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
  # A bundle is for a machine meant to have a GPU: none found is a failure.
  export MOMOE_REQUIRE_GPU=${MOMOE_REQUIRE_GPU:-1}
else
  BUILD=${BUILD_DIR:-build-gpu}
  case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
  BIN=$WORK/bin  # links to the build's binaries, filled after the build stage
  LIBS=""
fi
# CUDA's own libraries: the toolkit's (beside nvcc too), and cuBLAS/NCCL/cudart from PyTorch's
# wheels (nvidia/<lib>/lib, and CUDA 13's nvidia/cu13/lib).
CUDA_LIBS=""
NVCC_LIB=""
command -v nvcc > /dev/null && NVCC_LIB=$(cd "$(dirname "$(readlink -f "$(command -v nvcc)")")/../lib64" 2>/dev/null && pwd)
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib $NVCC_LIB; do
  [ -d "$d" ] && [[ ":$CUDA_LIBS:" != *":$d:"* ]] && CUDA_LIBS=$CUDA_LIBS:$d
done
if command -v python3 > /dev/null; then
  WHEELS=$(py - 2>/dev/null <<'EOF'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib"))):
        print(lib)
EOF
  )
  for d in $WHEELS; do [ -d "$d" ] && CUDA_LIBS=$CUDA_LIBS:$d; done
fi
LIBRARY_PATH_=${LIBS}${CUDA_LIBS}
LIBRARY_PATH_=${LIBRARY_PATH_#:}  # no empty entry: the loader would read it as the current directory
export LD_LIBRARY_PATH=${LIBRARY_PATH_}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MOMOE_SOURCE_DIR=$ROOT MOMOE_DATA_DIR=$ROOT/data
export OUT WORK BIN BUILD BUNDLE BUNDLE_DIR RESULTS
cd "$ROOT" || exit 2

GPUS=${MOMOE_GPUS:-0}
NO_GPU_WHY="nvidia-smi is not on PATH"
if [ -z "${MOMOE_GPUS:-}" ] && command -v nvidia-smi > /dev/null; then
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
  NO_GPU_WHY="nvidia-smi lists no GPU"
fi
if [ "$GPUS" -gt 0 ]; then export MOMOE_REQUIRE_GPU=1; fi

link_build_binaries() {
  mkdir -p "$BIN"
  local b
  for b in "${BINARIES[@]}"; do
    [ -x "$BUILD/$b" ] && ln -sf "$BUILD/$b" "$BIN/"
  done
}
[ -z "$BUNDLE_DIR" ] && link_build_binaries

declare -A VERDICT SECS
RAN=()
FAILED=0
STOP=""  # why the rest of the call does not run
for stage in "${STAGES[@]}"; do
  RAN+=("$stage")
  SECS[$stage]=-
  now=$(date +%s)
  left=$((START + DEADLINE - now))
  verdict=""
  if [ -n "$STOP" ]; then
    verdict="not run ($STOP)"; FAILED=1
  elif [ "$stage" != env ] && [ "$stage" != build ] && [ "$GPUS" -eq 0 ]; then
    if [ "${MOMOE_REQUIRE_GPU:-0}" = 1 ]; then
      verdict="FAILED (no GPU)"; FAILED=1
      echo "no GPU: $NO_GPU_WHY, and MOMOE_REQUIRE_GPU=1 (the default with a bundle): nothing was checked" \
        > "$RESULTS/$stage.digest"
    else
      verdict="skipped (no GPU)"
    fi
  elif [ "$stage" = build ] && [ -n "$BUNDLE_DIR" ]; then
    verdict="skipped (bundle)"
  elif [ "$left" -lt 15 ]; then
    verdict="not run (out of time)"; FAILED=1
  fi
  if [ -n "$verdict" ]; then
    VERDICT[$stage]=$verdict
    printf '%-12s %s\n' "$stage" "$verdict"
    write_results
    continue
  fi
  box=${BOX[$stage]}
  [ "$box" -gt "$left" ] && box=$left
  echo "== $stage (at most ${box} s)"
  t0=$(date +%s)
  STAGE=$stage STAGE_BOX=$box timeout --kill-after=10 "$box" "$SELF" --run-stage "$stage" \
    > "$RESULTS/$stage.log" 2>&1
  rc=$?
  SECS[$stage]=$(($(date +%s) - t0))
  case $rc in
    0) verdict=passed ;;
    124|137) verdict="TIMED OUT (${box} s)"; FAILED=1 ;;
    *) verdict="FAILED (exit $rc)"; FAILED=1 ;;
  esac
  [ "$stage" = env ] && [ $rc -eq 3 ] && STOP="env: a library the binaries need does not resolve"
  if [ "$stage" = build ]; then
    if [ $rc -eq 0 ]; then link_build_binaries; else STOP="the build failed"; fi
  fi
  VERDICT[$stage]=$verdict
  printf '%-12s %-26s %5s s  %s\n' "$stage" "$verdict" "${SECS[$stage]}" "$(keys_of "$stage")"
  write_results
done
echo "results: $OUT (summary.txt, digest.txt, results.tgz; $(( $(date +%s) - START )) s)"
echo
cat "$OUT/digest.txt"
exit $FAILED
