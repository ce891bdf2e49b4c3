#!/usr/bin/env bash
# momoe-export's transformers layout, loaded by transformers itself: a model with Mixtral's exact
# shape (configs/modern/mixtral.pbtxt) trained 12 steps at the quick start's size from a wide
# initialisation (far from uniform), evaluated by momoe-eval on 40 sequences of Brown's
# validation text with its routing decisions, exported; transformers_check.py loads
# EXPORT/transformers with AutoModelForCausalLM (a pinned transformers, installed once into
# VENV_DIR over the system's torch) and compares its routing and perplexity with momoe-eval's
# under the cross-path rule. A model of another shape gets no transformers folder and says why;
# a perturbed export (rope_theta) must fail the comparison.
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

train mixtral modern/mixtral
ckpt=$tmp/mixtral/ckpt-00000012
"$bin/momoe-eval" --checkpoint "$ckpt" --text "$text" --max-sequences 40 --attack-rate 0 \
  --routing-out "$tmp/mixtral.routing" > "$tmp/mixtral.eval" 2> "$tmp/eval.err" ||
  { cat "$tmp/eval.err"; fail "momoe-eval"; }
"$bin/momoe-export" --checkpoint "$ckpt" --out "$tmp/export" > "$tmp/export.log" 2>&1 ||
  { cat "$tmp/export.log"; fail "momoe-export"; }
expect_in "$tmp/export.log" "transformers' MixtralForCausalLM layout in $tmp/export/transformers"
expect_file "$tmp/export/transformers/config.json"
expect_file "$tmp/export/transformers/model.safetensors"
"$bin/momoe-data" prepare --out "$tmp/tokens" --train "$text" --vocab "$tmp/export/vocab.txt" \
  --quiet > /dev/null 2>&1 || fail "tokenizing with the export's vocabulary"
check() {  # check EXPORT: transformers against momoe-eval
  "$venv/bin/python" "$here/transformers_check.py" "$src/python" "$1" "$tmp/tokens" \
    "$tmp/mixtral.routing" "$tmp/mixtral.eval" MixtralForCausalLM
}
check "$tmp/export" || fail "transformers' Mixtral and momoe-eval disagree"

# The comparison can fail: the same weights with another rope_theta.
cp -r "$tmp/export" "$tmp/perturbed"
"$venv/bin/python" - "$tmp/perturbed/transformers/config.json" <<'PY' || fail "editing config.json"
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_theta"] = 5000.0
json.dump(c, open(sys.argv[1], "w"))
PY
if check "$tmp/perturbed" > "$tmp/perturbed.log" 2>&1; then
  cat "$tmp/perturbed.log"
  fail "rope_theta 10000 -> 5000 passes the comparison: the check could not see it"
fi
echo "rope_theta 10000 -> 5000 is caught: $(grep -m1 FAIL "$tmp/perturbed.log")"

# Another shape (learned positions, LayerNorm, biases): momoe's layout only, and why.
train quickstart quickstart --set train.steps=2 --set train.checkpoint_every=2
"$bin/momoe-export" --checkpoint "$tmp/quickstart/ckpt-00000002" --out "$tmp/qs" > "$tmp/qs.log" 2>&1 ||
  { cat "$tmp/qs.log"; fail "momoe-export of the quick start"; }
expect_in "$tmp/qs.log" "no transformers layout (not Mixtral's shape: its blocks are not pre-norm)"
expect_no_file "$tmp/qs/transformers" "the quick start is not Mixtral's shape"
echo "PASS: transformers loads momoe's Mixtral export and agrees with momoe-eval"
