#!/usr/bin/env bash
# momoe-export + python/momoe_torch: every config family (and the block style, tying, activation,
# evaluation capacity, AC normalisation and SparseMixer mask variants), trained a few steps at
# the quick start's size, exported, loaded by the plain-PyTorch module (Debian's python3-torch,
# no momoe code) and evaluated on the same tokens: its perplexity equals momoe-eval's to 1e-5
# relative. Then the export's refusals.
# With "mpi": a checkpoint saved at EP 2 and the same weights re-saved at EP 1 export to
# byte-identical folders.
# Usage: export_test.sh BIN_DIR SOURCE_DIR cpu|mpi
set -euo pipefail
bin=$1
src=$2
mode=${3:-cpu}
py=${MOMOE_PYTHON:-/usr/bin/python3}
fail() { echo "FAIL: $*" >&2; exit 1; }
"$py" -c "import torch, numpy" 2> /dev/null ||
  fail "$py cannot import torch and numpy: install python3-torch and python3-numpy (tests/run.sh does)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_export_test.XXXXXX")
trap '[ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
text=$src/data/brown/valid.txt.gz
export MOMOE_PROGRESS_SECONDS=1000
# The quick start's model size (configs/quickstart.pbtxt) for every family.
size=(--set model.d_model=128 --set model.n_heads=4 --set model.seq_len=64
      --set model.moe.num_experts=8 --set model.moe.d_expert=128 --set train.batch_size=16
      --set data.vocab_max_size=10000 --set train.final_eval=NONE --set train.eval_every=0
      --set train.log_every=100)

# train NAME CONFIG [overrides...]: a run at the quick start's size, 12 steps at a high learning
# rate from a wider initialisation, so that the model is far from uniform (perplexity in the
# hundreds) and a wrong coefficient moves it well past the tolerance (checked below).
train() {
  local name=$1 config=$2
  shift 2
  "$bin/momoe-train" --config "$src/configs/$config.pbtxt" --run-dir "$tmp/$name" \
    --set train.steps=12 --set train.checkpoint_every=12 --set train.optimizer.lr=4e-3 \
    --set train.schedule.warmup_steps=0 --set model.init_std=0.05 "${size[@]}" "$@" \
    > "$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; fail "$name: training"; }
}

# torch_ppl NAME: the PyTorch module's result line for NAME's export.
torch_ppl() {
  (cd "$src/python" && "$py" -m momoe_torch --model "$tmp/$1.export" --dataset "$tmp/$1.tokens" \
    --split train --max-sequences 40 --threads 2)
}

# The tolerance sits on top of discrete choices (top-k, capacity, AC clusters): rounding may flip
# one token's routing, which moves the perplexity by far less than 1e-5 here (measured: 5e-9 to
# 6e-7 relative), but a new BLAS kernel or torch could in principle get closer to it.
# check NAME: momoe-eval's perplexity of the checkpoint on 40 sequences of Brown's validation
# text (two batches of 16 and a last one padded, as an AC metric and an evaluation capacity see
# it), and the PyTorch module's on the same tokens (tokenized by momoe-data with the
# checkpoint's vocabulary).
check() {
  local name=$1 ckpt=$tmp/$1/ckpt-00000012
  "$bin/momoe-eval" --checkpoint "$ckpt" --text "$text" --max-sequences 40 --attack-rate 0 \
    > "$tmp/$name.eval" 2> "$tmp/$name.eval.err" || { cat "$tmp/$name.eval.err"; fail "$name: momoe-eval"; }
  "$bin/momoe-export" --checkpoint "$ckpt" --out "$tmp/$name.export" > "$tmp/$name.export.log" 2>&1 ||
    { cat "$tmp/$name.export.log"; fail "$name: momoe-export"; }
  [ -f "$tmp/$name.export/vocab.txt" ] || fail "$name: the export has no vocab.txt"
  "$bin/momoe-data" prepare --out "$tmp/$name.tokens" --train "$text" \
    --vocab "$tmp/$name.export/vocab.txt" --quiet > /dev/null 2>&1 || fail "$name: tokenizing"
  torch_ppl "$name" > "$tmp/$name.torch" 2> "$tmp/$name.torch.err" ||
    { cat "$tmp/$name.torch.err"; fail "$name: the PyTorch module"; }
  "$py" - "$tmp/$name.eval" "$tmp/$name.torch" "$name" <<'EOF' || exit 1
import json, sys
momoe = json.load(open(sys.argv[1]))
torch = json.load(open(sys.argv[2]))
name = sys.argv[3]
rel = abs(torch["ppl"] - momoe["ppl"]) / momoe["ppl"]
print(f"{name}: momoe-eval ppl {momoe['ppl']:.9g}, PyTorch {torch['ppl']:.9g}, relative difference {rel:.2e}")
if momoe["tokens"] != torch["tokens"]:
    sys.exit(f"FAIL: {name}: momoe-eval scored {momoe['tokens']} tokens, PyTorch {torch['tokens']}")
if not rel <= 1e-5:
    sys.exit(f"FAIL: {name}: perplexities differ by {rel:.3e} relative (> 1e-5)")
if not momoe["ppl"] < 2000:
    sys.exit(f"FAIL: {name}: perplexity {momoe['ppl']}: the model is too close to uniform to test much")
EOF
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

# The evaluation batch: without AC layers it does not matter (up to rounding); an AC model
# (the paper's per-batch rule) is evaluated in its recorded batch and refuses another.
"$bin/momoe-eval" --checkpoint "$tmp/quickstart/ckpt-00000012" --text "$text" --max-sequences 40 \
  --attack-rate 0 --batch 8 > "$tmp/quickstart.b8" 2> /dev/null || fail "quickstart at --batch 8"
"$py" - "$tmp/quickstart.eval" "$tmp/quickstart.b8" <<'EOF' || exit 1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["batch"] == 16 and b["batch"] == 8, (a["batch"], b["batch"])
if not abs(a["ppl"] - b["ppl"]) <= 1e-6 * a["ppl"]:
    sys.exit(f"FAIL: without AC the batch changes the perplexity: {a['ppl']} vs {b['ppl']}")
EOF
set +e
"$bin/momoe-eval" --checkpoint "$tmp/acmoe/ckpt-00000012" --text "$text" --max-sequences 40 \
  --attack-rate 0 --batch 8 > /dev/null 2> "$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "AC router computes its metric from each evaluation batch" "$tmp/err" &&
  grep -q "16 sequences" "$tmp/err" || { cat "$tmp/err"; fail "an AC model at another --batch: rc $rc"; }
"$bin/momoe-eval" --checkpoint "$tmp/acmoe/ckpt-00000012" --text "$text" --max-sequences 40 \
  --attack-rate 0 --batch 16 > "$tmp/acmoe.b16" 2> /dev/null || fail "an AC model at its own --batch"
cmp <(grep -o '"ppl":[0-9.e+-]*' "$tmp/acmoe.eval") <(grep -o '"ppl":[0-9.e+-]*' "$tmp/acmoe.b16") ||
  fail "an AC model at its own --batch differs from the default"

# perturb NAME WHAT PYTHON: the comparison can fail. PYTHON edits `c` (NAME's config.json) into
# a copy of the export, which must move the PyTorch perplexity by more than 1e-4 relative.
perturb() {
  local name=$1 what=$2 edit=$3
  rm -rf "$tmp/$name.p.export" && cp -r "$tmp/$name.export" "$tmp/$name.p.export"
  ln -sfn "$tmp/$name.tokens" "$tmp/$name.p.tokens"
  "$py" - "$tmp/$name.p.export/config.json" "$edit" <<'EOF' || fail "$name: editing config.json"
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
EOF
  torch_ppl "$name.p" > "$tmp/$name.p.torch" || fail "$name: the PyTorch module on the perturbed export"
  "$py" - "$tmp/$name.torch" "$tmp/$name.p.torch" "$name: $what" <<'EOF' || exit 1
import json, sys
a, b = (json.load(open(p))["ppl"] for p in sys.argv[1:3])
rel = abs(a - b) / a
print(f"{sys.argv[3]} moves the PyTorch perplexity by {rel:.2e} relative")
if not rel > 1e-4:
    sys.exit(f"FAIL: {sys.argv[3]} does not move the perplexity past 1e-4: the check could not see it")
EOF
}
perturb momentum "mu 0.7 -> 0.6" \
  'for b in c["blocks"]: b["residual"]["a_state"] = 0.6'
perturb adam "Adam beta2 0.999 -> 0.99" 'c["blocks"][0]["residual"]["beta2"] = 0.99'
perturb robust "input shift x 0.5" \
  'for b in c["blocks"]: b["residual"]["input_shift"] *= 0.5'
perturb acmoe "AC router off" \
  'for b in c["blocks"]: b["ac_router"]["enabled"] = False'
perturb ac_paper "paper -> reference-code normalisation" \
  'for b in c["blocks"]: b["ac_router"]["normalization"] = "reference_code" if b["ac_router"]["enabled"] else None'
perturb ac_unit_norm "unit-norm embeddings -> linear logits" \
  'for b in c["blocks"]: b["ac_router"]["logits"] = "linear"'
perturb sparsemixer "SparseMixer jitter 0.1 -> 0.5" \
  'for b in c["blocks"]:
    if b["type"] == "moe": b["sparsemixer"]["jitter"] = 0.5'
perturb eval_capacity "no evaluation capacity" \
  'for b in c["blocks"]: b["eval_capacity_factor"] = 0.0'
perturb convention "the other sign convention" \
  'for b in c["blocks"]:
    if b["type"] == "moe": b["residual"]["a_out"] = -b["residual"]["a_out"]'

# A dataset tokenized with another vocabulary is refused, not scored.
"$bin/momoe-data" prepare --out "$tmp/other.tokens" --train "$text" --vocab-max-size 500 --quiet \
  > /dev/null 2>&1 || fail "preparing with another vocabulary"
ln -sfn "$tmp/quickstart.export" "$tmp/other.export"
if torch_ppl other > /dev/null 2> "$tmp/other.err"; then fail "another tokenizer's ids were scored"; fi
grep -q "tokenizer fingerprint" "$tmp/other.err" || { cat "$tmp/other.err"; fail "the refusal does not name the tokenizer"; }

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

# Refusals: an existing --out, a run directory instead of a checkpoint, a missing flag.
set +e
"$bin/momoe-export" --checkpoint "$tmp/quickstart/ckpt-00000012" --out "$tmp/quickstart.export" 2> "$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "exists" "$tmp/err" || { cat "$tmp/err"; fail "an existing --out: rc $rc"; }
set +e
"$bin/momoe-export" --checkpoint "$tmp/quickstart" --out "$tmp/x" 2> "$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "ckpt-00000012" "$tmp/err" || { cat "$tmp/err"; fail "a run directory: rc $rc"; }
[ ! -e "$tmp/x" ] && [ ! -e "$tmp/x.tmp" ] || fail "a refused export left a folder"
echo "PASS"
