#!/usr/bin/env bash
# momoe-data prepare as a user meets it on a small corpus, in seconds: `info` names every file a
# dataset (and its vocabulary) came from; a damaged dataset (a corrupted or truncated shard, a
# swapped vocabulary) exits 2 from verify (listing every damaged shard) and from momoe-train,
# saying how to repair it. With SentencePiece: progress lines while a model trains, and SIGINT
# there stops momoe-data within a second (exit 3), leaving no trainer process behind.
# Usage: data_prepare_test.sh BIN_DIR SRC_DIR [SP=0|1]
set -u
bin=$1
src=$2
sp=${3:-0}
run=$(mktemp -d)
trap 'rm -rf "$run"' EXIT
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
export EXPECT_DIR=$run  # expect_code's out and err
# A few thousand lines of the bundled corpus, cut into three training files and one to validate.
zcat "$src/data/brown/train.txt.gz" | head -n 6000 > "$run/all.txt"
split -l 2000 -d --additional-suffix=.txt "$run/all.txt" "$run/part"
zcat "$src/data/brown/valid.txt.gz" | head -n 500 > "$run/valid.txt"
parts=("$run"/part0{0,1,2}.txt)
prep=(prepare --train "${parts[0]}" --train "${parts[1]}" --train "${parts[2]}" --valid "$run/valid.txt"
      --vocab-max-size 3000 --threads 1 --chunk-mb 1 --shard-tokens 20000)

# info: the vocabulary came from all three training files, and each split lists its files.
"$bin/momoe-data" "${prep[@]}" --out "$run/ds" --quiet || fail "prepare"
"$bin/momoe-data" info "$run/ds" > "$run/info" || fail "info"
expect_in "$run/info" "built from the train split's 3 file(s)"
for f in "${parts[@]}" "$run/valid.txt"; do expect_in "$run/info" "$f"; done

# Damage: one shard corrupted, another truncated. verify lists both, exits 2, says how to repair.
cp -r "$run/ds" "$run/bad"
[ "$(ls "$run/bad"/train-*.tok | wc -l)" -ge 2 ] || fail "expected 2 or more train shards"
printf '\xff\xff\xff\x7f' | dd of="$run/bad/train-00000.tok" bs=1 seek=100 conv=notrunc status=none
truncate -s -8 "$run/bad/train-00001.tok"
expect_code 2 "has 2 damaged shard(s)" "$bin/momoe-data" verify "$run/bad"
expect_in "$run/err" "train-00000.tok is corrupted"
expect_in "$run/err" "train-00001.tok"
expect_in "$run/err" "remove $run/bad and prepare it again: momoe-data prepare --out $run/bad --train ${parts[0]}"
# Training from it: exit 2 (the input must change), pointing at verify.
config=$src/tests/launcher/tiny_config.pbtxt
expect_code 2 "run \`momoe-data verify $run/bad\` to see every damaged file" \
  "$bin/momoe-train" --config "$config" --run-dir "$run/r" --set train.steps=1 --set data.dataset="$run/bad"
# A swapped vocabulary (another preparation's): verify and training exit 2, saying what to do.
"$bin/momoe-data" prepare --train "${parts[1]}" --vocab-max-size 2000 --out "$run/other" --quiet ||
  fail "prepare another dataset"
cp -r "$run/ds" "$run/swap"
cp "$run/other/vocab.txt" "$run/swap/vocab.txt"
expect_code 2 "and prepare it again" "$bin/momoe-data" verify "$run/swap"
expect_in "$run/err" "vocabulary mismatch"
expect_code 2 "momoe-data verify $run/swap" \
  "$bin/momoe-train" --config "$config" --run-dir "$run/r" --set train.steps=1 --set data.dataset="$run/swap"

if [ "$sp" = 1 ]; then
  # A unigram model of 8000 pieces on the bundled training text trains for several seconds.
  out=$run/spstop
  MOMOE_PROGRESS_SECONDS=0.2 "$bin/momoe-data" prepare --out "$out" --train "$src/data/brown/train.txt.gz" \
    --tokenizer sentencepiece --sp-type unigram --sp-vocab-size 8000 > "$run/sp.log" 2>&1 &
  pid=$!
  for _ in $(seq 300); do
    grep -q "sentencepiece: training the unigram model of 8,000 pieces on 46,175 sentences" "$run/sp.log" && break
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.05
  done
  expect_in "$run/sp.log" "sentencepiece: training the unigram model of 8,000 pieces on 46,175 sentences"
  kill -INT "$pid"
  t0=$(date +%s%N)
  wait "$pid"; rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$rc" -eq 3 ] || { cat "$run/sp.log"; fail "SIGINT while training SentencePiece: exit $rc, expected 3"; }
  [ "$ms" -le 1500 ] || { cat "$run/sp.log"; fail "SIGINT while training SentencePiece: stopped after $ms ms"; }
  expect_in "$run/sp.log" "stopped while training the SentencePiece model"
  pgrep -f -- "prepare --out $out" > /dev/null && fail "a SentencePiece trainer is left running"
  grep -q "saving a checkpoint" "$run/sp.log" && fail "momoe-data speaks of a checkpoint"
fi
echo PASS
