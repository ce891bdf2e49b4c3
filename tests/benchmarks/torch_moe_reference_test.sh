#!/usr/bin/env bash
# benchmarks/torch_moe_reference.py (issue 21's PyTorch side) on the CPU: its --check passes in
# f32 and bf16, ReLU and GELU, and fails on a copy whose combine sends outputs to the wrong tokens
# (the check can fail); `momoe-bench layer --torch 1` runs it in the same run and prints the
# speedup; --torch refuses a layer the reference does not implement.
# The grouped path (torch._grouped_mm) needs a GPU: tests/run_gpu.sh runs it there.
# Usage: torch_moe_reference_test.sh BENCH_BIN SOURCE_DIR
set -euo pipefail
bench=$1
src=$2
py=${MOMOE_PYTHON:-/usr/bin/python3}
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
"$py" -c "import torch" 2> /dev/null ||
  fail "$py cannot import torch: install python3-torch (tests/run.sh does)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_torch_ref_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ref=$src/benchmarks/torch_moe_reference.py
export MOMOE_PYTHON=$py  # the interpreter momoe-bench --torch runs
small=(--device cpu --tokens 200 --d 32 --f 48 --experts 4 --top-k 2 --iterations 2 --warmup 1
       --threads 1 --check)

for dtype in f32 bf16; do
  for act in relu gelu; do
    "$py" "$ref" layer "${small[@]}" --dtype "$dtype" --activation "$act" > "$tmp/out" 2>&1 ||
      fail "--check failed for $dtype $act: $(cat "$tmp/out")"
    "$py" - "$tmp/out" <<'PY' || fail "bad result line for $dtype $act: $(cat "$tmp/out")"
import json, math, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["impl"] == "loop" and r["check_tokens"] == 200, r
# The bound is float32's rounding bound for these widths (logic_bound), not a measured figure.
assert math.isclose(r["check_logic_bound"], 8 * 2.0 ** -24 * math.sqrt(32 + 48 + 200)), r
assert 0 <= r["check_logic_rel_error"] <= r["check_logic_bound"], r
assert r["fwd_bwd_ms"] > 0 and r["tflops_per_second"] > 0, r
PY
  done
done

# The check bites: outputs combined into the wrong tokens, gates applied out of order, the
# lowest-scoring experts chosen.
sed 's|tok = order // self.k|tok = order % self.k|' "$ref" > "$tmp/wrong_tokens.py"
sed 's|gate.reshape(-1)\[order\]|gate.reshape(-1)[order.flip(0)]|' "$ref" > "$tmp/wrong_gates.py"
sed 's|gate, idx = probs.topk(self.k, dim=-1)  # \[T, K\]|gate, idx = probs.topk(self.k, dim=-1, largest=False)|' \
  "$ref" > "$tmp/wrong_experts.py"
for bad in wrong_tokens wrong_gates wrong_experts; do
  cmp -s "$ref" "$tmp/$bad.py" && fail "$bad: the mutation did not apply (the reference changed?)"
  if "$py" "$tmp/$bad.py" layer "${small[@]}" > "$tmp/out" 2> "$tmp/err"; then
    fail "$bad: --check passed a wrong layer"
  fi
  grep -q "check failed: " "$tmp/err" || fail "$bad: $(cat "$tmp/err")"
done

# momoe-bench runs the reference in the same run (dropless, plain) and prints both.
"$bench" layer --tokens 256 --d 64 --f 64 --experts 8 --dropless 1 --dtype bf16 --iterations 2 \
  --warmup 1 --threads 1 --torch 1 > "$tmp/bench" 2>&1 || fail "momoe-bench --torch: $(cat "$tmp/bench")"
"$py" - "$tmp/bench" <<'PY' || fail "momoe-bench --torch line: $(cat "$tmp/bench")"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["dtype"] == "bf16" and r["dropless"] == 1, r
assert r["torch_fwd_bwd_ms"] > 0 and r["torch_check_logic_bound"] > 0, r
assert 0 <= r["torch_check_logic_rel_error"] <= r["torch_check_logic_bound"], r
assert r["torch_check_grouped_rel_error"] == -1 and r["torch_impl"] == "loop", r  # no GPU here
assert r["torch_version"], r
assert abs(r["speedup_vs_torch"] - r["torch_fwd_bwd_ms"] / r["fwd_bwd_ms"]) < 1e-3 * r["speedup_vs_torch"], r
assert r["copy_gb_per_second"] > 0 and r["dense_gemm_gflops_per_second"] > 0, r
# The expert GEMMs timed alone (dropless) and their share of the layer's time.
assert r["expert_gemms_ms"] > 0, r
assert abs(r["expert_gemms_share"] - r["expert_gemms_ms"] / r["fwd_bwd_ms"]) < 1e-3 * r["expert_gemms_share"], r
# The token movement alone (dispatch gather, combine): rates and shares of the same run's copy.
for m in ("dispatch", "combine"):
    assert r[m + "_gb_per_second"] > 0, r
    assert abs(r[m + "_copy_share"] * r["copy_gb_per_second"] - r[m + "_gb_per_second"]) < 1e-3 * r[m + "_gb_per_second"], r
# The forward alone is timed too; the backward is the rest of the forward + backward median
# (each printed to 6 significant digits: three roundings of at most 5e-6 of each value).
printed = 5e-6 * (r["fwd_ms"] + abs(r["bwd_ms"]) + r["fwd_bwd_ms"])
assert r["fwd_ms"] > 0 and abs(r["fwd_ms"] + r["bwd_ms"] - r["fwd_bwd_ms"]) <= printed, r
PY
if "$bench" layer --tokens 64 --d 32 --f 32 --experts 4 --iterations 1 --torch 1 > "$tmp/out" 2>&1; then
  fail "--torch with capacity was not refused"
fi
grep -q "torch compares the plain dropless layer" "$tmp/out" || fail "$(cat "$tmp/out")"
echo PASS
