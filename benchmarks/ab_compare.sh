#!/usr/bin/env bash
# A/B comparison of two builds on one machine, interleaved round by round so that drift and
# neighbours' load hit both alike: momoe-bench layer (fwd+bwd tokens/s) and momoe-bench train
# --preset quickstart (tokens/s), ROUNDS rounds each, then the median of each side and the ratio
# B / A (> 1: B is faster). One JSON line per measurement, then a summary line per benchmark.
#   benchmarks/ab_compare.sh OLD_BUILD_DIR NEW_BUILD_DIR [ROUNDS=7]
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 OLD_BUILD_DIR NEW_BUILD_DIR [ROUNDS]" >&2; exit 2; }
a=$(cd "$1" && pwd)
b=$(cd "$2" && pwd)
rounds=${3:-7}
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"  # the train benchmark writes a run directory under the temporary directory
run() {  # build, benchmark -> tokens/s
  case "$2" in
    layer) "$1/benchmarks/momoe-bench" layer --iterations 5 --warmup 1 ;;
    train) "$1/benchmarks/momoe-bench" train --preset quickstart --steps 8 --warmup 2 ;;
  esac | python3 -c 'import json,sys
for line in sys.stdin:
    j = json.loads(line)
    if j.get("bench") in ("layer", "train"): print(j["tokens_per_second"])'
}
for bench in layer train; do
  : > "$work/$bench.a"
  : > "$work/$bench.b"
  for ((r = 1; r <= rounds; ++r)); do
    ta=$(run "$a" $bench)
    tb=$(run "$b" $bench)
    echo "$ta" >> "$work/$bench.a"
    echo "$tb" >> "$work/$bench.b"
    echo "{\"bench\": \"$bench\", \"round\": $r, \"a_tokens_per_second\": $ta, \"b_tokens_per_second\": $tb}"
  done
  python3 - "$bench" "$work/$bench.a" "$work/$bench.b" <<'PY'
import statistics, sys
name, fa, fb = sys.argv[1:]
a = [float(x) for x in open(fa)]
b = [float(x) for x in open(fb)]
ma, mb = statistics.median(a), statistics.median(b)
print(f'{{"bench": "{name}", "summary": true, "rounds": {len(a)}, "a_median": {ma:.1f}, '
      f'"b_median": {mb:.1f}, "ratio_b_over_a": {mb / ma:.3f}}}')
PY
done
