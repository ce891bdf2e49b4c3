#!/usr/bin/env bash
# momoe-export's transformers layout, loaded by transformers itself: a model with Mixtral's exact
# shape (configs/modern/mixtral.pbtxt) and one with Qwen2-MoE's (configs/modern/qwen2-moe.pbtxt:
# a gated shared expert, gates not renormalised), each trained 12 steps at the quick start's size
# from a wide initialisation (far from uniform), evaluated by momoe-eval on 40 sequences of
# Brown's validation text with its routing decisions, exported; transformers_check.py loads
# EXPORT/transformers with AutoModelForCausalLM (a pinned transformers, installed once into
# VENV_DIR over the system's torch) and compares its routing and perplexity with momoe-eval's
# under the cross-path rule. A model of another shape gets no transformers folder and says why;
# perturbed exports (Mixtral's rope_theta, Qwen2-MoE's norm_topk_prob) must fail the comparison.
# Usage: transformers_export_test.sh BIN_DIR SOURCE_DIR VENV_DIR
set -euo pipefail
bin=$1
src=$2
venv=$3
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../testing/shell_helpers.sh
source "$here/../testing/shell_helpers.sh"  # fail, expect_in, expect_file, install_pinned_venv
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_transformers_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export MOMOE_PROGRESS_SECONDS=1000 OPENBLAS_NUM_THREADS=1
requirements=$here/transformers_requirements.txt
pin=$(grep -m1 '^transformers==' "$requirements")
# Over Debian's python3 and its python3-torch (scripts/install_deps.sh), as export_test uses.
VENV_PYTHON=${MOMOE_PYTHON:-/usr/bin/python3} install_pinned_venv "$venv" "$requirements" \
  --system-site-packages
"$venv/bin/python" -c "import sys, transformers; sys.exit(transformers.__version__ != '${pin#transformers==}')" ||
  fail "$venv does not hold $pin"
text=$src/data/brown/valid.txt.gz

# train NAME CONFIG [overrides...]: 12 steps at a high rate from a wider initialisation.
train() {
  local name=$1 config=$2
  shift 2
  "$bin/momoe-train" --config "$src/configs/$config.pbtxt" --run-dir "$tmp/$name" \
    --set train.steps=12 --set train.checkpoint_every=12 --set train.optimizer.lr=4e-3 \
    --set train.schedule.warmup_steps=0 --set model.init_std=0.05 --set train.final_eval=NONE \
    --set train.eval_every=0 --set data.cache_dir="$tmp/cache" "$@" > "$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; fail "$name: training"; }
}

# export_and_check NAME CONFIG ARCHITECTURE [overrides...]: trained, evaluated with its routing
# decisions, exported (with ARCHITECTURE's layout) and compared by transformers.
export_and_check() {
  local name=$1 config=$2 arch=$3
  shift 3
  train "$name" "$config" "$@"
  "$bin/momoe-eval" --checkpoint "$tmp/$name/ckpt-00000012" --text "$text" --max-sequences 40 \
    --attack-rate 0 --routing-out "$tmp/$name.routing" > "$tmp/$name.eval" 2> "$tmp/eval.err" ||
    { cat "$tmp/eval.err"; fail "$name: momoe-eval"; }
  "$bin/momoe-export" --checkpoint "$tmp/$name/ckpt-00000012" --out "$tmp/$name.export" \
    > "$tmp/$name.export.log" 2>&1 || { cat "$tmp/$name.export.log"; fail "$name: momoe-export"; }
  expect_in "$tmp/$name.export.log" "transformers' $arch layout in $tmp/$name.export/transformers"
  expect_file "$tmp/$name.export/transformers/config.json"
  expect_file "$tmp/$name.export/transformers/model.safetensors"
  [ -d "$tmp/tokens" ] || "$bin/momoe-data" prepare --out "$tmp/tokens" --train "$text" \
    --vocab "$tmp/$name.export/vocab.txt" --quiet > /dev/null 2>&1 ||
    fail "tokenizing with the export's vocabulary"
  check "$name" "$tmp/$name.export" "$arch" || fail "transformers' $arch and momoe-eval disagree"
}

check() {  # check NAME EXPORT ARCHITECTURE: transformers against momoe-eval
  "$venv/bin/python" "$here/transformers_check.py" "$src/python" "$2" "$tmp/tokens" \
    "$tmp/$1.routing" "$tmp/$1.eval" "$3"
}

# perturb NAME ARCHITECTURE WHAT PYTHON: the export with config.json `c` edited by PYTHON must
# fail the comparison (the check can see WHAT).
perturb() {
  local name=$1 arch=$2 what=$3 edit=$4
  rm -rf "$tmp/perturbed" && cp -r "$tmp/$name.export" "$tmp/perturbed"
  "$venv/bin/python" - "$tmp/perturbed/transformers/config.json" "$edit" <<'PY' ||
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
    fail "editing config.json"
  if check "$name" "$tmp/perturbed" "$arch" > "$tmp/perturbed.log" 2>&1; then
    cat "$tmp/perturbed.log"
    fail "$name: $what passes the comparison: the check could not see it"
  fi
  echo "$name: $what is caught: $(grep -m1 FAIL "$tmp/perturbed.log")"
}

export_and_check mixtral modern/mixtral MixtralForCausalLM
perturb mixtral MixtralForCausalLM "rope_theta 10000 -> 5000" 'c["rope_theta"] = 5000.0'
export_and_check qwen2 modern/qwen2-moe Qwen2MoeForCausalLM
perturb qwen2 Qwen2MoeForCausalLM "gates renormalised (norm_topk_prob)" 'c["norm_topk_prob"] = True'

# Another shape (learned positions, LayerNorm, biases): momoe's layout only, and why.
train quickstart quickstart --set train.steps=2 --set train.checkpoint_every=2
"$bin/momoe-export" --checkpoint "$tmp/quickstart/ckpt-00000002" --out "$tmp/qs" > "$tmp/qs.log" 2>&1 ||
  { cat "$tmp/qs.log"; fail "momoe-export of the quick start"; }
expect_in "$tmp/qs.log" "no transformers layout (not Mixtral's shape: its blocks are not pre-norm; not Qwen2-MoE's: its blocks are not pre-norm; not Qwen3-MoE's: its blocks are not pre-norm)"
expect_no_file "$tmp/qs/transformers" "the quick start is no published architecture's shape"
# Qwen2-MoE's routing with an ungated shared expert (DeepSeek-MoE's): neither shape.
train ungated modern/qwen2-moe --set train.steps=2 --set train.checkpoint_every=2 \
  --set model.moe.shared_expert_gate=false
"$bin/momoe-export" --checkpoint "$tmp/ungated/ckpt-00000002" --out "$tmp/ug" > "$tmp/ug.log" 2>&1 ||
  { cat "$tmp/ug.log"; fail "momoe-export of the ungated model"; }
expect_in "$tmp/ug.log" "not Qwen2-MoE's: block 0: it has no gated shared expert;"
expect_no_file "$tmp/ug/transformers" "an ungated shared expert is not Qwen2-MoE's shape"
# Qwen3-MoE's shape (q/k norms): its layout is written (transformers 4.46 has no Qwen3-MoE; the
# GPU script's transformers stage loads it with the machine's 5.x), with its tensors named.
train qwen3 modern/qwen3-moe --set train.steps=2 --set train.checkpoint_every=2
"$bin/momoe-export" --checkpoint "$tmp/qwen3/ckpt-00000002" --out "$tmp/q3" > "$tmp/q3.log" 2>&1 ||
  { cat "$tmp/q3.log"; fail "momoe-export of Qwen3-MoE's shape"; }
expect_in "$tmp/q3.log" "transformers' Qwen3MoeForCausalLM layout in $tmp/q3/transformers"
"$venv/bin/python" - "$tmp/q3/transformers" "$src/python" <<'PY' || fail "Qwen3-MoE's layout"
import json, sys
sys.path.insert(0, sys.argv[2])
from momoe_torch.safetensors_numpy import read_safetensors
c = json.load(open(sys.argv[1] + "/config.json"))
assert c["model_type"] == "qwen3_moe" and c["norm_topk_prob"] and not c["attention_bias"], c
t, _ = read_safetensors(sys.argv[1] + "/model.safetensors")
L, E, D, H = c["num_hidden_layers"], c["num_experts"], c["hidden_size"], c["num_attention_heads"]
F = c["moe_intermediate_size"]
want = {"model.embed_tokens.weight": (c["vocab_size"], D), "model.norm.weight": (D,),
        "lm_head.weight": (c["vocab_size"], D)}
for i in range(L):
    p = f"model.layers.{i}."
    want.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                 p + "self_attn.o_proj.weight": (D, D), p + "mlp.gate.weight": (E, D),
                 p + "self_attn.q_norm.weight": (D // H,), p + "self_attn.k_norm.weight": (D // H,)})
    for x in "qkv":
        want[p + f"self_attn.{x}_proj.weight"] = (D, D)
    for e in range(E):
        for n, shape in (("gate_proj", (F, D)), ("up_proj", (F, D)), ("down_proj", (D, F))):
            want[p + f"mlp.experts.{e}.{n}.weight"] = shape
have = {k: tuple(v.shape) for k, v in t.items()}
assert have == want, sorted(set(have.items()) ^ set(want.items()))[:6]
print(f"Qwen3-MoE's layout: {len(have)} tensors named and shaped as Qwen3MoeForCausalLM's")
PY
echo "PASS: transformers loads momoe's Mixtral and Qwen2-MoE exports and agrees with momoe-eval;" \
  "Qwen3-MoE's layout is written"
