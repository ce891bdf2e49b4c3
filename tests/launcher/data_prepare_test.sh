#!/usr/bin/env bash
# momoe-data prepare as a user meets it on a small corpus, in seconds: `info` names every file a
# dataset (and its vocabulary) came from.
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
      --vocab-max-size 3000 --threads 1 --chunk-mb 1)

# info: the vocabulary came from all three training files, and each split lists its files.
"$bin/momoe-data" "${prep[@]}" --out "$run/ds" --quiet || fail "prepare"
"$bin/momoe-data" info "$run/ds" > "$run/info" || fail "info"
expect_in "$run/info" "built from the train split's 3 file(s)"
for f in "${parts[@]}" "$run/valid.txt"; do expect_in "$run/info" "$f"; done
echo PASS
