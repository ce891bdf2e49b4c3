#!/usr/bin/env bash
# TensorBoard reads momoe's event files: momoe-train on the tiny model (run A, 6 steps with
# checkpoints at 3 and 6), then run B resumed from step 3's checkpoint (a rollback) to step 8;
# tensorboard_check.py loads RUN_DIR with TensorBoard's own EventAccumulator and checks every
# scalar, tag and step against metrics.jsonl (the rolled-back steps dropped, as metrics.jsonl's
# rollback marker says), then flips a byte in one record and checks TensorBoard skips it without
# raising. train.tensorboard=false writes no event file; --fresh moves them to the archive.
# The pinned TensorBoard (tensorboard_requirements.txt) is installed once into VENV_DIR (under
# the build tree; pip reaches PyPI); a failed install fails the test.
# Usage: tensorboard_test.sh BIN_DIR CONFIG VENV_DIR
set -u
bin=$1
config=$2
venv=$3
here=$(cd "$(dirname "$0")" && pwd)
requirements="$here/tensorboard_requirements.txt"
pin=$(grep -m1 '^tensorboard==' "$requirements")  # tensorboard==X.Y.Z
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
export OPENBLAS_NUM_THREADS=1 MOMOE_PROGRESS_SECONDS=0
# shellcheck source=../testing/shell_helpers.sh
source "$here/../testing/shell_helpers.sh"  # fail, expect_file, install_pinned_venv

install_pinned_venv "$venv" "$requirements"
"$venv/bin/python" -c "import sys, tensorboard; sys.exit(tensorboard.__version__ != '${pin#tensorboard==}')" ||
  fail "$venv does not hold $pin"

# train RUN_DIR [FLAGS...]: the tiny model with a shared token cache; output in RUN_DIR.log.
train() {
  local dir=$1; shift
  "$bin/momoe-train" --config "$config" --run-dir "$dir" --set train.eval_sequences=8 \
    --set data.cache_dir="$run/cache" "$@" > "$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "momoe-train $*"; }
}
dir=$run/tb
train "$dir" --set train.steps=6 --set train.checkpoint_every=3 --set train.keep_checkpoints=5 \
  --set train.eval_every=3 --set train.final_eval=SUBSET
sleep 1  # run B's event file is named by a later second, so it sorts after run A's
train "$dir" --set train.steps=8 --set train.checkpoint_every=3 --set train.keep_checkpoints=5 \
  --set train.eval_every=3 --set train.final_eval=WHOLE --resume-from "$dir/ckpt-00000003"
mkdir "$run/damaged"
"$venv/bin/python" "$here/tensorboard_check.py" "$dir" "$run/damaged" || fail "tensorboard_check.py"

# Off: no event file. --fresh: run A's and B's event files move to the archive with metrics.jsonl.
off=$run/off
train "$off" --set train.steps=1 --set train.final_eval=NONE --set train.tensorboard=false
expect_file "$off/metrics.jsonl" "the run's JSON lines"
compgen -G "$off/events.out.tfevents.*" > /dev/null &&
  fail "train.tensorboard=false wrote $(ls "$off")"
train "$dir" --set train.steps=1 --set train.final_eval=NONE --fresh
archived=$(ls -d "$dir"/archive/*)
expect_file "$archived/metrics.jsonl" "runs A and B's JSON lines, archived"
[ "$(compgen -G "$archived/events.out.tfevents.*" | wc -l)" -eq 2 ] ||
  { ls -R "$dir"; fail "--fresh did not archive the two event files"; }
[ "$(compgen -G "$dir/events.out.tfevents.*" | wc -l)" -eq 1 ] ||
  { ls "$dir"; fail "--fresh: expected the new run's event file only"; }
echo "tensorboard_test: ok"
