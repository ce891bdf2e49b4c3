#!/usr/bin/env bash
# momoe-export + python/momoe_torch: every config family (and the block style, tying, activation,
# evaluation capacity, AC normalisation and SparseMixer mask variants), trained a few steps at
# the quick start's size, exported, loaded by the plain-PyTorch module (Debian's python3-torch,
# no momoe code) and evaluated on the same tokens. Cross-path equality (python/momoe_torch/
# cross_path.py): routing decisions compared and counted first (flips only at near-ties), then
# the perplexity on equal decisions within float32 epsilon x depth. Each family's perturbation and
# a mutated copy of the module must fail that comparison. The module derives the residual
# coefficients from the papers' quantities in config.json's "dynamics" (export_dynamics_test.py
# checks that derivation), so a wrong mapping in momoe shows in the comparison; momoe's own
# "residual" coefficients are cross-checked (refused, both named, when they differ). Then the
# export's refusals. Labelled blas: tests/run.sh reruns it under every OpenBLAS kernel this CPU
# runs.
# With "mpi": a checkpoint saved at EP 2 and the same weights re-saved at EP 1 export to
# byte-identical folders.
# Usage: export_test.sh BIN_DIR SOURCE_DIR cpu|mpi
set -euo pipefail
bin=$1
src=$2
mode=${3:-cpu}
py=${MOMOE_PYTHON:-/usr/bin/python3}
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
"$py" -c "import torch, numpy" 2> /dev/null ||
  fail "$py cannot import torch and numpy: install python3-torch and python3-numpy (tests/run.sh does)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_export_test.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
# MOMOE_EXPORT_TEST_CACHE (tests/run.sh sets one for all its phases, and removes it): the trained
# checkpoints and the float64 reference results are kept there, so that a later BLAS-kernel
# phase trains nothing and reruns the reference only where its momoe-eval decided otherwise.
# What each phase compares is its own: momoe-eval under its kernel against the reference.
cache=${MOMOE_EXPORT_TEST_CACHE:-}
runs=$tmp
if [ -n "$cache" ]; then
  runs=$cache/runs
  mkdir -p "$runs" "$cache/reference"
fi
text=$src/data/brown/valid.txt.gz
export MOMOE_PROGRESS_SECONDS=1000
# The quick start's model size (configs/quickstart.pbtxt) for every family.
size=(--set model.d_model=128 --set model.n_heads=4 --set model.seq_len=64
      --set model.moe.num_experts=8 --set model.moe.d_expert=128 --set train.batch_size=16
      --set data.vocab_max_size=10000 --set train.final_eval=NONE --set train.eval_every=0
      --set train.log_every=100 --set data.cache_dir="$tmp/cache")

# train NAME CONFIG [overrides...]: a run at the quick start's size, 12 steps at a high learning
# rate from a wider initialisation, so that the model is far from uniform (perplexity in the
# hundreds) and a wrong coefficient moves it well past the tolerance (checked below).
train() {
  local name=$1 config=$2
  shift 2
  # A checkpoint an earlier phase completed (its manifest is written last) is reused.
  [ -f "$runs/$name/ckpt-00000012/manifest.pb" ] && return
  "$bin/momoe-train" --config "$src/configs/$config.pbtxt" --run-dir "$runs/$name" \
    --set train.steps=12 --set train.checkpoint_every=12 --set train.optimizer.lr=4e-3 \
    --set train.schedule.warmup_steps=0 --set model.init_std=0.05 "${size[@]}" "$@" \
    > "$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; fail "$name: training"; }
}

# The comparison of the two paths follows python/momoe_torch/cross_path.py (the rule of every
# cross-path test): the reference is the module in float64, so only momoe's float32 rounding (under
# whichever BLAS kernel) separates them. Decisions first: momoe-eval writes its routing decisions
# (--routing-out); the module counts where its own differ (a flip must be a near-tie of its logits;
# capacity slots must agree on the same choices), then evaluates on momoe's decisions. Values
# second: that perplexity and momoe-eval's agree within float32 epsilon x the forward's depth x
# the mean NLL (|ln ratio|). The reference runs are jobs of export_reference.py (one process).
jobs=()
# job KEY NAME EXPORT BATCH EXPECT [WHAT]: a reference run of NAME's routing (NAME.routing, or
# NAME.b<BATCH>.routing at another batch) and momoe-eval result on EXPORT; EXPECT pass or caught.
job() {
  local key=$1 name=$2 export=$3 batch=$4 expect=$5 what=${6:-}
  local suffix=""
  [ "$batch" -eq 16 ] || suffix=.b$batch
  jobs+=("$("$py" -c 'import json, sys; k, n, e, b, x, w, t, s = sys.argv[1:]
print(json.dumps({"key": k, "name": n, "export": e, "batch": int(b), "expect": x, "what": w,
  "dataset": f"{t}/{n}.tokens", "routing": f"{t}/{n}{s}.routing", "eval": f"{t}/{n}{s}.eval"}))' \
    "$key" "$name" "$export" "$batch" "$expect" "$what" "$tmp" "$suffix")")
}
# run_jobs MODULE_DIR RESULTS: every job so far, against the momoe_torch package in MODULE_DIR.
run_jobs() {
  local IFS=,
  echo "[${jobs[*]}]" > "$tmp/jobs.json"
  jobs=()
  "$py" "$src/tests/launcher/export_reference.py" "$1" "$tmp/jobs.json" "$2" \
    ${cache:+"$cache/reference"}
}

# check NAME: momoe-eval's perplexity of the checkpoint on 40 sequences of Brown's validation
# text (two batches of 16 and a last one padded, as an AC metric and an evaluation capacity see
# it) with its routing decisions, the export, and the same tokens tokenized by momoe-data with
# the checkpoint's vocabulary; the reference job that compares them.
check() {
  local name=$1 ckpt=$runs/$1/ckpt-00000012
  "$bin/momoe-eval" --checkpoint "$ckpt" --text "$text" --max-sequences 40 --attack-rate 0 \
    --routing-out "$tmp/$name.routing" > "$tmp/$name.eval" 2> "$tmp/$name.eval.err" ||
    { cat "$tmp/$name.eval.err"; fail "$name: momoe-eval"; }
  "$bin/momoe-export" --checkpoint "$ckpt" --out "$tmp/$name.export" > "$tmp/$name.export.log" 2>&1 ||
    { cat "$tmp/$name.export.log"; fail "$name: momoe-export"; }
  [ -f "$tmp/$name.export/vocab.txt" ] || fail "$name: the export has no vocab.txt"
  "$bin/momoe-data" prepare --out "$tmp/$name.tokens" --train "$text" \
    --vocab "$tmp/$name.export/vocab.txt" --quiet > /dev/null 2>&1 || fail "$name: tokenizing"
  job "$name" "$name" "$tmp/$name.export" 16 pass
}

# perturb NAME WHAT PYTHON: the comparison can fail. PYTHON edits `c` (NAME's config.json) into
# a copy of the export; the module on that copy must fail the rule against momoe-eval (a decision
# that is no near-tie, or a value past the bound). The module derives the residual coefficients
# from each block's "dynamics" (the papers' quantities); momoe's own "residual" numbers, which it
# would cross-check and refuse, are dropped from the copy, so the comparison is what must see it.
perturbations=0
perturb() {
  local name=$1 what=$2 edit=$3
  local copy=$name.p$((perturbations += 1))
  cp -r "$tmp/$name.export" "$tmp/$copy.export"
  "$py" - "$tmp/$copy.export/config.json" "$edit" <<'EOF' || fail "$name: editing config.json"
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[2])
for b in c["blocks"]:
    b.pop("residual", None)
json.dump(c, open(sys.argv[1], "w"))
EOF
  job "$copy" "$name" "$tmp/$copy.export" 16 caught "$what"
}

if [ "$mode" = mpi ]; then
  mpi=(mpirun -np 2 --oversubscribe)
  [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
  run=$tmp/ep
  "${mpi[@]}" "$bin/momoe-train" --config "$src/configs/momentum.pbtxt" --run-dir "$run" --ep 2 \
    --set train.steps=4 "${size[@]}" > "$tmp/ep2.log" 2>&1 || { cat "$tmp/ep2.log"; fail "EP 2 training"; }
  [ -f "$run/ckpt-00000004/experts-ep1-of-2.safetensors" ] || fail "no EP 2 checkpoint"
  "$bin/momoe-export" --checkpoint "$run/ckpt-00000004" --out "$tmp/from_ep2" > /dev/null ||
    fail "exporting the EP 2 checkpoint"
  # Resumed at one rank with nothing left to train, the run saves the same weights at EP 1.
  "$bin/momoe-train" --config "$src/configs/momentum.pbtxt" --run-dir "$run" --ep 1 \
    --set train.steps=4 "${size[@]}" > "$tmp/ep1.log" 2>&1 || { cat "$tmp/ep1.log"; fail "EP 1 resume"; }
  [ -f "$run/ckpt-00000004/experts-ep0-of-1.safetensors" ] || fail "the checkpoint was not re-saved at EP 1"
  "$bin/momoe-export" --checkpoint "$run/ckpt-00000004" --out "$tmp/from_ep1" > /dev/null ||
    fail "exporting the EP 1 checkpoint"
  cmp "$tmp/from_ep2/model.safetensors" "$tmp/from_ep1/model.safetensors" ||
    fail "model.safetensors differs between the EP 2 and EP 1 layouts"
  # config.json too, but for its record of the run's config (parallel.ep differs).
  "$py" - "$tmp/from_ep2/config.json" "$tmp/from_ep1/config.json" <<'EOF' ||
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert "parallel {\n  ep: 2" in a["source"].pop("config") and "ep: 1" in b["source"].pop("config")
sys.exit(0 if a == b else 1)
EOF
    fail "config.json differs between the EP 2 and EP 1 layouts"
  echo "PASS (mpi): EP 2 and EP 1 exports are byte-identical"
  exit 0
fi

for family in quickstart smoe momentum adam robust acmoe glam sparsemixer; do
  train "$family" "$family"
  check "$family"
done
train pre_ln_tied quickstart --set model.block_style=PRE_LN --set model.tie_embeddings=true \
  --set model.activation=GELU --set model.moe.activation=GELU_TANH
check pre_ln_tied
train eval_capacity momentum --set model.moe.eval_capacity_factor=1.0 --set model.moe.top_k=2
check eval_capacity
train ac_paper acmoe --set model.moe.ac.normalization=PAPER --set model.moe.ac.min_cluster_size=0
check ac_paper
train ac_unit_norm acmoe --set model.moe.ac.logits=UNIT_NORM_EMBEDDINGS
check ac_unit_norm
train sparsemixer_ref sparsemixer --set model.moe.sparsemixer.mask=MASK_REFERENCE_CODE
check sparsemixer_ref
# The reference code's sign convention, a dense block between momentum layers (the state passes).
train convention momentum --set model.moe.convention=REFERENCE_CODE --set model.arch=smsfsmsm
check convention
# The block of current models with the seeds' momentum (a dense SwiGLU block between the MoE
# ones), and Mixtral's shape (configs/modern/mixtral.pbtxt).
train modern_block quickstart --set model.block_style=PRE_LN --set model.position=ROPE \
  --set model.norm=RMS_NORM --set model.linear_bias=false --set model.activation=SWIGLU \
  --set model.moe.activation=SWIGLU --set model.arch=sgsfsm
check modern_block
train mixtral modern/mixtral
check mixtral
# DeepSeek-V3's routing (configs/modern/deepseek-v3.pbtxt): sigmoid scores scaled 2.5, shared
# experts, fine-grained experts in groups, loss-free balancing's bias (moved 12 times), here
# node-limited: 2 of the 4 groups kept by the sum of their ceil(6 / 2) = 3 best scores (the
# preset's group-limited rule sums 2; python/tests/test_routing.py checks both by hand). A group
# choice that differs must be a near-tie of the group sums (replay.py).
train deepseek modern/deepseek-v3 --set model.moe.num_experts=32 --set model.moe.d_expert=32 \
  --set model.moe.topk_groups=0 --set model.moe.max_ep_ranks=2
check deepseek
# Qwen2-MoE's (configs/modern/qwen2-moe.pbtxt): gates the softmax's probabilities (not
# renormalised), a shared expert scaled per token by sigmoid(y . w).
train qwen2 modern/qwen2-moe
check qwen2
# Qwen3-MoE's (configs/modern/qwen3-moe.pbtxt): each head's q and k normalised before RoPE.
train qwen3 modern/qwen3-moe
check qwen3

# The evaluation batch: without AC layers it does not matter (up to rounding); an AC model
# (the paper's per-batch rule) is evaluated in its recorded batch and refuses another. At batch
# 8 (other GEMM shapes, so other rounding) momoe-eval meets the rule against the reference at
# batch 8 (checked with the jobs below).
"$bin/momoe-eval" --checkpoint "$runs/quickstart/ckpt-00000012" --text "$text" --max-sequences 40 \
  --attack-rate 0 --batch 8 --routing-out "$tmp/quickstart.b8.routing" > "$tmp/quickstart.b8.eval" \
  2> /dev/null || fail "quickstart at --batch 8"
job quickstart.b8 quickstart "$tmp/quickstart.export" 8 pass
set +e
"$bin/momoe-eval" --checkpoint "$runs/acmoe/ckpt-00000012" --text "$text" --max-sequences 40 \
  --attack-rate 0 --batch 8 > /dev/null 2> "$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "AC router computes its metric from each evaluation batch" "$tmp/err" &&
  grep -q "16 sequences" "$tmp/err" || { cat "$tmp/err"; fail "an AC model at another --batch: rc $rc"; }
"$bin/momoe-eval" --checkpoint "$runs/acmoe/ckpt-00000012" --text "$text" --max-sequences 40 \
  --attack-rate 0 --batch 16 > "$tmp/acmoe.b16" 2> /dev/null || fail "an AC model at its own --batch"
cmp <(grep -o '"ppl":[0-9.e+-]*' "$tmp/acmoe.eval") <(grep -o '"ppl":[0-9.e+-]*' "$tmp/acmoe.b16") ||
  fail "an AC model at its own --batch differs from the default (the same path: bit equality)"

perturb momentum "mu 0.7 -> 0.6" \
  'for b in c["blocks"]: b["dynamics"]["mu"] = 0.6'
perturb adam "Adam beta2 0.999 -> 0.99" 'c["blocks"][0]["dynamics"]["adam"]["beta2"] = 0.99'
perturb robust "rho 0.5 -> 0.45 (gamma, mu and alpha by Eq. 17)" \
  'for b in c["blocks"]: b["dynamics"]["rho"] = 0.45'
perturb acmoe "AC router off" \
  'for b in c["blocks"]: b["ac_router"]["enabled"] = False'
perturb ac_paper "paper -> reference-code normalisation" \
  'for b in c["blocks"]: b["ac_router"]["normalization"] = "reference_code" if b["ac_router"]["enabled"] else None'
perturb ac_unit_norm "unit-norm embeddings -> linear logits" \
  'for b in c["blocks"]: b["ac_router"]["logits"] = "linear"'
perturb sparsemixer "SparseMixer jitter 0.1 -> 0.5" \
  'for b in c["blocks"]:
    if b["type"] == "moe": b["sparsemixer"]["jitter"] = 0.5'
# A change after the last router moves only values: the value bound must see it (in the paper
# convention gamma scales only the output, out = x + gamma p).
perturb momentum "the last layer's gamma x 1.01" \
  'c["blocks"][-1]["dynamics"]["gamma"] *= 1.01'
perturb eval_capacity "no evaluation capacity" \
  'for b in c["blocks"]: b["eval_capacity_factor"] = 0.0'
perturb convention "the other sign convention" \
  'for b in c["blocks"]:
    if b["type"] == "moe": b["dynamics"]["convention"] = "paper"'
perturb mixtral "rope_base 10000 -> 5000" 'c["rope_base"] = 5000.0'
perturb deepseek "routed_scaling 2.5 -> 2.4" \
  'for b in c["blocks"]: b["routed_scaling"] = 2.4'
perturb deepseek "sigmoid -> softmax scores" \
  'for b in c["blocks"]: b["score_function"] = "softmax"'
perturb deepseek "groups scored by their 3 best scores -> 2 best" \
  'for b in c["blocks"]: b["group_top"] = 2'
perturb modern_block "RMSNorm eps 1e-5 -> 1e-2" 'c["norm_eps"] = 1e-2'
perturb qwen2 "gates renormalised over the chosen" \
  'for b in c["blocks"]: b["renormalize"] = True'
run_jobs "$src/python" "$tmp/results.json"

# At batch 8 the decisions on the 40 sequences are batch 16's but at near-ties (checked against
# the reference above); where they are all equal, the reference's perplexity (float64) does not
# move with the batch beyond float64 epsilon x depth x mean NLL.
"$py" - "$tmp" "$src/python" <<'EOF' || exit 1
import json, math, sys
sys.path.insert(0, sys.argv[2])
from momoe_torch.safetensors_numpy import read_safetensors
from momoe_torch.cross_path import forward_depth, perplexity_tolerance
base = sys.argv[1] + "/quickstart"
rows = json.load(open(base + ".b8.eval"))["tokens"]  # the real rows, first in both files
files = [read_safetensors(f"{base}{s}.routing")[0] for s in ("", ".b8")]
flips = sum(int((files[0][k][:rows] != files[1][k][:rows]).any(axis=1).sum())
            for k in files[0] if k.endswith(".experts"))
print(f"quickstart: batch 8 against 16: {flips} tokens routed differently")
if flips == 0:
    results = json.load(open(sys.argv[1] + "/results.json"))
    r16, r8 = results["quickstart"]["ppl"], results["quickstart.b8"]["ppl"]
    _, depth = forward_depth(json.load(open(base + ".export/config.json")))
    diff = abs(math.log(r16 / r8))
    tol = perplexity_tolerance(depth, math.log(r16), eps=2.0 ** -52)
    print(f"the reference at batch 16 and 8: |ln ratio| {diff:.2e} <= {tol:.2e}")
    if not diff <= tol:
        sys.exit(f"FAIL: without AC the batch changes the reference's perplexity by {diff:.3e}")
else:
    print("the references at batch 16 and 8 are not compared: they replayed other decisions "
          "(each met the rule against momoe-eval above)")
EOF

# A mutated copy of the module (one coefficient of the momentum update changed by 1%) fails too.
mutant=$tmp/mutant
mkdir -p "$mutant" && cp -r "$src/python/momoe_torch" "$mutant/"
sed -i 's/p_out = res\["a_state"\] \* p_prev + res\["a_input"\] \* ud/p_out = 0.99 * res["a_state"] * p_prev + res["a_input"] * ud/' \
  "$mutant/momoe_torch/model.py"
grep -q '0.99 \* res\["a_state"\]' "$mutant/momoe_torch/model.py" || fail "the mutation did not apply"
job momentum.mutant momentum "$tmp/momentum.export" 16 caught "a_state x 0.99 in the module's momentum update"
run_jobs "$mutant" "$tmp/mutant.json"

# A dataset tokenized with another vocabulary is refused, not scored.
"$bin/momoe-data" prepare --out "$tmp/other.tokens" --train "$text" --vocab-max-size 500 --quiet \
  > /dev/null 2>&1 || fail "preparing with another vocabulary"
rc=0
(cd "$src/python" && "$py" -m momoe_torch --model "$tmp/quickstart.export" \
  --dataset "$tmp/other.tokens" --split train --max-sequences 40) > /dev/null 2> "$tmp/other.err" || rc=$?
[ "$rc" -eq 2 ] || { cat "$tmp/other.err"; fail "another tokenizer's dataset: exit $rc, expected 2"; }
grep -q "another tokenizer than the model's" "$tmp/other.err" || { cat "$tmp/other.err"; fail "the refusal does not name the tokenizer"; }
! grep -q Traceback "$tmp/other.err" || { cat "$tmp/other.err"; fail "the refusal is a traceback"; }

# The exported names are torch.nn's: every tensor of the file is loaded (strict), none missing.
"$py" - "$tmp/quickstart.export" "$src/python" <<'EOF' || exit 1
import json, sys
sys.path.insert(0, sys.argv[2])
import momoe_torch
tensors, meta = momoe_torch.read_safetensors(sys.argv[1] + "/model.safetensors")
cfg = json.load(open(sys.argv[1] + "/config.json"))
d, e = cfg["d_model"], cfg["blocks"][0]["num_experts"]
want = {"embed_tokens.weight": (cfg["vocab_size"], d), "blocks.0.attn.qkv.weight": (3 * d, d),
        "blocks.0.moe.router.weight": (e, d), "blocks.0.moe.experts.7.fc1.weight": (128, d),
        "blocks.0.moe.experts.7.fc2.weight": (d, 128), "head.weight": (cfg["vocab_size"], d)}
for name, shape in want.items():
    if tuple(tensors[name].shape) != shape:
        sys.exit(f"FAIL: {name} is {tensors[name].shape}, expected {shape}")
model = momoe_torch.load(sys.argv[1])
if set(model.state_dict()) != set(tensors):
    sys.exit("FAIL: the module's parameters are not the file's tensors")
if meta.get("momoe.step") != "12":
    sys.exit(f"FAIL: metadata {meta}")
print("names and layouts: ok")
EOF

# The module's cross-check: an export whose "residual" (momoe's coefficients) disagrees with its
# "dynamics" (the papers' quantities the module derives them from) is refused, naming both.
"$py" - "$tmp/momentum.export/config.json" "$src/python" <<'EOF' || exit 1
import json, sys
sys.path.insert(0, sys.argv[2])
import momoe_torch
from momoe_torch.dynamics import ResidualMismatchError
cfg = json.load(open(sys.argv[1]))
momoe_torch.MomoeLM(cfg)  # the export as written agrees
cfg["blocks"][1]["residual"]["a_state"] = 0.6
try:
    momoe_torch.MomoeLM(cfg)
    sys.exit("FAIL: a residual a_state of 0.6 against mu 0.7 was not refused")
except ResidualMismatchError as e:
    if "blocks[1]" not in str(e) or "0.6" not in str(e) or "0.7" not in str(e):
        sys.exit(f"FAIL: the refusal does not name the block and both numbers: {e}")
print("residual cross-check: ok")
EOF

# Refusals: an existing --out, a run directory instead of a checkpoint, a missing flag.
set +e
"$bin/momoe-export" --checkpoint "$runs/quickstart/ckpt-00000012" --out "$tmp/quickstart.export" 2> "$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "exists" "$tmp/err" || { cat "$tmp/err"; fail "an existing --out: rc $rc"; }
set +e
"$bin/momoe-export" --checkpoint "$runs/quickstart" --out "$tmp/x" 2> "$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "ckpt-00000012" "$tmp/err" || { cat "$tmp/err"; fail "a run directory: rc $rc"; }
[ ! -e "$tmp/x" ] && [ ! -e "$tmp/x.tmp" ] || fail "a refused export left a folder"
echo "PASS"
