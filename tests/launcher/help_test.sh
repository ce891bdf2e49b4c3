#!/usr/bin/env bash
# Every executable and subcommand answers -h and --help alike: exit 0, its usage (with an example)
# on stdout, nothing on stderr, nothing written. momoe-compare, whose grids are long and write
# much, trains nothing unless a grid is chosen: without arguments it prints its usage on stderr
# and exits 2, naming what to pass for the papers grid, and ./runs does not appear.
# Usage: help_test.sh BIN_DIR BENCH_BUILT(0|1)   (BIN_DIR: the launcher's; momoe-bench is in
# BIN_DIR/../benchmarks when BENCH_BUILT is 1)
set -u
bin=$1
bench_built=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_code, expect_no_file
EXPECT_DIR=$work/expect
mkdir "$EXPECT_DIR" "$work/cwd"
cd "$work/cwd" || fail "cannot enter $work/cwd"

commands=("momoe-train" "momoe-stats" "momoe-eval" "momoe-generate" "momoe-export"
          "momoe-compare" "momoe-launch" "momoe-data" "momoe-data prepare" "momoe-data verify"
          "momoe-data info" "momoe-data tokenize")
paths=()
for cmd in "${commands[@]}"; do paths+=("$bin/$cmd"); done
if [ "$bench_built" = 1 ]; then
  [ -x "$bin/../benchmarks/momoe-bench" ] || fail "momoe-bench is not built in $bin/../benchmarks"
  for sub in "" layer attention train memory alltoall scaling data sgemm env; do
    paths+=("$bin/../benchmarks/momoe-bench${sub:+ $sub}")
  done
fi

for cmd in "${paths[@]}"; do
  name=$(basename "${cmd%% *}")${cmd#"${cmd%% *}"}
  for flag in -h --help; do
    # shellcheck disable=SC2086  # "momoe-data prepare": the command and its subcommand
    $cmd $flag > "$work/$flag.out" 2> "$work/$flag.err"
    rc=$?
    [ "$rc" -eq 0 ] || { cat "$work/$flag.err"; fail "$name $flag exited $rc, expected 0"; }
    [ -s "$work/$flag.err" ] && { cat "$work/$flag.err"; fail "$name $flag wrote on stderr"; }
    grep -q "^example: " "$work/$flag.out" || { cat "$work/$flag.out"; fail "$name $flag: no usage with an example on stdout"; }
  done
  cmp -s "$work/-h.out" "$work/--help.out" || { diff "$work/-h.out" "$work/--help.out"; fail "$name: -h and --help differ"; }
done
# -h anywhere a flag may stand, even after a bad one's turn would come, is the usage.
expect_code 0 "usage: momoe-train" "$bin/momoe-train" --config missing.pbtxt -h --bogus
# The flags' list ends with -h, --help.
expect_code 0 "-h, --help" "$bin/momoe-eval" --help
# A flag's help says what it does: shards close only at the end of a tokenizing chunk.
expect_code 0 "at the end of the chunk that reaches them" "$bin/momoe-data" prepare --help
expect_in "$EXPECT_DIR/out" "the step at which shards close"

[ -z "$(ls -A)" ] || { ls -la; fail "a --help wrote into the working directory"; }

# momoe-compare without arguments: the usage on stderr, exit 2, nothing trained or written.
expect_code 2 "--preset papers trains the papers grid" "$bin/momoe-compare"
grep -q "^usage: momoe-compare" "$EXPECT_DIR/err" || { cat "$EXPECT_DIR/err"; fail "momoe-compare: no usage on stderr"; }
[ -s "$EXPECT_DIR/out" ] && { cat "$EXPECT_DIR/out"; fail "momoe-compare without arguments wrote on stdout"; }
# Flags that choose no grid are refused the same way.
expect_code 2 "momoe-compare trains no grid it is not given" "$bin/momoe-compare" --seeds 1 --final-eval none
expect_no_file runs "momoe-compare without a chosen grid must not create ./runs"
[ -z "$(ls -A)" ] || { ls -la; fail "momoe-compare without a chosen grid wrote into the working directory"; }
# The choice made explicit: --dry-run lists the papers grid's 14 runs, still writing nothing.
expect_code 0 "7 variants x 2 seeds = 14 runs" "$bin/momoe-compare" --preset papers --dry-run
[ "$(grep -c -- "--fresh" "$EXPECT_DIR/out")" -eq 14 ] || { cat "$EXPECT_DIR/out"; fail "--preset papers --dry-run did not list 14 runs"; }
expect_no_file runs "momoe-compare --dry-run must not create ./runs"
echo PASS
