#!/usr/bin/env bash
# momoe's CPU backend against PyTorch on this machine, side by side: the MoE layer forward +
# backward on the three shapes of issue 14 and the quick-start training step, at 1 thread and at
# every core, A/B interleaved for ROUNDS rounds (medians), with the ratio momoe / PyTorch in
# speed (> 1: momoe is faster).
#   benchmarks/torch_compare.sh                 # ROUNDS=3, BUILD_DIR=build
#   ROUNDS=5 SHAPES="2048,352,352,16,2" benchmarks/torch_compare.sh
#   MOMOE_BENCH=/path/to/old/momoe-bench benchmarks/torch_compare.sh   # another build's binary
#                                                                       # (nothing is built)
# PyTorch is Debian's python3-torch (OpenBLAS, the same BLAS as momoe), installed here when
# missing; the README's build and test commands never need it. PyTorch runs each point in its
# best threading: torch.set_num_threads(N) with OpenBLAS single-threaded, or one torch thread
# with N OpenBLAS threads, whichever is faster in that round.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
BUILD_DIR=${BUILD_DIR:-build}
SHAPES=${SHAPES:-"2048,352,352,16,2 4096,512,2048,8,2 8192,256,1024,64,8"}
PY=/usr/bin/python3
CORES=$(nproc)

if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "torch_compare: installing Debian's python3-torch" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get install -y -q python3-torch >/dev/null
fi
if [ -n "${MOMOE_BENCH:-}" ]; then
  BENCH=$MOMOE_BENCH
else
  BUILD_DIR=$BUILD_DIR scripts/build.sh >/dev/null
  BENCH="$BUILD_DIR/benchmarks/momoe-bench"
fi
TORCH=benchmarks/torch_cpu_reference.py

# One number from a JSON line on stdin.
field() { "$PY" -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }

# torch: the faster of its two threading set-ups at N threads (see above).
torch_ms() {  # what threads args...
  local what=$1 threads=$2; shift 2
  local a b key=fwd_bwd_ms
  [ "$what" = train ] && key=step_seconds
  a=$(OPENBLAS_NUM_THREADS=1 "$PY" $TORCH "$what" --threads "$threads" "$@" | field $key)
  if [ "$threads" -gt 1 ]; then
    b=$(OPENBLAS_NUM_THREADS=$threads "$PY" $TORCH "$what" --threads 1 "$@" | field $key)
    "$PY" -c "print(min($a, $b))"
  else
    echo "$a"
  fi
}

echo "# momoe vs PyTorch $("$PY" -c 'import torch; print(torch.__version__)') on $(nproc) cores, $ROUNDS rounds, medians"
echo "# $("$BENCH" env 2>/dev/null || echo "$BENCH: no env line (an older build)")"
printf '%-28s %7s %12s %12s %8s\n' "case" threads "momoe ms" "torch ms" "speedup"
export OPENBLAS_NUM_THREADS=1
for threads in 1 $CORES; do
  [ "$threads" = 1 ] || [ "$CORES" != 1 ] || continue
  for shape in $SHAPES train; do
    m=(); t=()
    for ((r = 0; r < ROUNDS; ++r)); do
      if [ "$shape" = train ]; then
        m+=("$("$BENCH" train --preset quickstart --steps 10 --threads "$threads" | field step_seconds)")
        t+=("$(torch_ms train "$threads" --steps 10)")
      else
        IFS=, read -r T D F E K <<<"$shape"
        args=(--tokens "$T" --d "$D" --f "$F" --experts "$E" --top-k "$K" --iterations 3)
        m+=("$("$BENCH" layer "${args[@]}" --threads "$threads" | field fwd_bwd_ms)")
        t+=("$(torch_ms layer "$threads" "${args[@]}")")
      fi
    done
    "$PY" - "$shape" "$threads" "${m[*]}" "${t[*]}" <<'EOF'
import statistics, sys
shape, threads, m, t = sys.argv[1:]
m = statistics.median(float(x) for x in m.split())
t = statistics.median(float(x) for x in t.split())
scale = 1e3 if shape == "train" else 1.0
name = "quickstart train step" if shape == "train" else "layer " + shape
print(f"{name:<28} {threads:>7} {m * scale:12.1f} {t * scale:12.1f} {t / m:8.2f}")
EOF
  done
done
