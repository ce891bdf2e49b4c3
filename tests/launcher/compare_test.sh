#!/usr/bin/env bash
# momoe-compare on a tiny grid (2 variants x 2 seeds, 20 steps): every run finishes, the tables
# hold one row per variant and per run, the curves every step; bad grids are refused (exit 2)
# with a message naming the problem, before anything runs.
# Usage: compare_test.sh BIN_DIR TINY_CONFIG
set -u
bin=$1
config=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code
common=(--config "$config" --seeds "1,2" --set train.steps=20 --set train.eval_sequences=8
        --set train.attack_rate=0.05 --set data.cache_dir="$out/cache" --losses 7.5)

# --final-eval subset: the runs skip the whole-split pass (the slow part of a small grid).
"$bin/momoe-compare" "${common[@]}" --variant 'plain model.arch=sgsg' \
  --variant 'momentum model.arch=smsm' --jobs 2 --out "$out/c" --final-eval subset > "$out/log" 2>&1 ||
  { cat "$out/log"; fail "the tiny grid failed"; }
grep -q "(whole splits)" "$out/c/runs/plain-seed1.log" && fail "--final-eval subset: a run evaluated the whole splits"
grep -q "first 8 sequences" "$out/c/runs/plain-seed1.log" || { cat "$out/c/runs/plain-seed1.log"; fail "no subset evaluation"; }
grep -q "| plain | 2 | " "$out/c/summary.md" || { cat "$out/c/summary.md"; fail "no plain row"; }
grep -q "| momentum | 2 | " "$out/c/summary.md" || { cat "$out/c/summary.md"; fail "no momentum row"; }
grep -q "| momentum | \`model.arch=smsm\` |" "$out/c/summary.md" || { cat "$out/c/summary.md"; fail "summary.md lacks the overrides"; }
grep -q ',"model.arch=smsm"$' "$out/c/runs.csv" || { cat "$out/c/runs.csv"; fail "runs.csv lacks the overrides"; }
[ "$(wc -l < "$out/c/runs.csv")" -eq 5 ] || { cat "$out/c/runs.csv"; fail "runs.csv: not 4 runs"; }
[ "$(wc -l < "$out/c/curves.csv")" -eq 81 ] || fail "curves.csv: not 4 x 20 steps"
if python3 -c "import matplotlib" 2> /dev/null || /usr/bin/python3 -c "import matplotlib" 2> /dev/null; then
  [ -s "$out/c/loss.png" ] || { cat "$out/log"; fail "no loss.png"; }
fi
for run in plain-seed1 plain-seed2 momentum-seed1 momentum-seed2; do
  [ -f "$out/c/runs/$run/stats.pb" ] || fail "no stats for $run"
done

# Against a baseline grid: "NAME+departure" pairs with NAME's runs of the same seed; and two
# finished grids compare without training (a grid against itself differs by zero).
"$bin/momoe-compare" "${common[@]}" --variant 'plain+dropless model.arch=sgsg model.moe.dropless=true' \
  --jobs 2 --out "$out/b" --final-eval subset --baseline "$out/c" > "$out/log" 2>&1 ||
  { cat "$out/log"; fail "the grid with --baseline failed"; }
grep -q "^## Against $out/c" "$out/b/summary.md" || { cat "$out/b/summary.md"; fail "summary.md has no baseline section"; }
grep -q "^| plain+dropless | plain | 1,2 | " "$out/b/summary.md" || { cat "$out/b/summary.md"; fail "no paired row"; }
"$bin/momoe-compare" --results "$out/c" --baseline "$out/c" > "$out/log" 2>&1 || { cat "$out/log"; fail "--results failed"; }
grep -q "^| momentum | momentum | 1,2 | .* | +0.00 +- 0.00 | +0.00 +- 0.00 | +0.000 +- 0.000 |$" "$out/log" ||
  { cat "$out/log"; fail "a grid against itself does not differ by zero"; }

# expect_refused NEEDLE ARGS...: exit 2, the message names the problem, nothing ran.
expect_refused() {
  local needle=$1; shift
  "$bin/momoe-compare" "$@" > "$out/err" 2>&1; local rc=$?
  [ "$rc" -eq 2 ] || { cat "$out/err"; fail "'$*' exited $rc, expected 2"; }
  grep -qF -- "$needle" "$out/err" || { cat "$out/err"; fail "'$*' did not say '$needle'"; }
  ! grep -q "done" "$out/err" || fail "'$*' ran something"
}
expect_refused "--final-eval most is not one of both, subset, whole, none" "${common[@]}" \
  --variant 'a model.arch=sgsg' --final-eval most --out "$out/e"
expect_refused "mismatched budgets" "${common[@]}" --variant 'a model.arch=sgsg' \
  --variant 'b model.arch=smsm train.steps=30' --out "$out/d"
expect_refused "variant b" "${common[@]}" --variant 'a model.arch=sgsg' \
  --variant 'b model.moe.no_such_field=1' --out "$out/d"
expect_refused "unknown --preset 'nope'" --preset nope --out "$out/d"
expect_refused "'a' appears twice" "${common[@]}" --variant 'a model.arch=sgsg' \
  --variant 'a model.arch=smsm' --out "$out/d"
expect_refused "already holds a comparison" "${common[@]}" --variant 'a model.arch=sgsg' --out "$out/c"
expect_refused "is not a seed" --config "$config" --variant 'a model.arch=sgsg' --seeds 1,x --out "$out/d"
expect_refused "is not a finished momoe-compare output" "${common[@]}" --variant 'a model.arch=sgsg' \
  --baseline "$out/none" --out "$out/d"
expect_refused "give both" --results "$out/c"
expect_refused "--out has no effect with it" --results "$out/c" --baseline "$out/c" --out "$out/d"
expect_refused "no variant of this grid pairs with a finished run" "${common[@]}" \
  --variant 'other model.arch=sgsg' --baseline "$out/c" --out "$out/d"
[ ! -e "$out/d" ] || fail "a refused grid created its output directory"
echo PASS
