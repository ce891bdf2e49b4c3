#!/usr/bin/env bash
# The mutation harness on a toy project (one C++ file, one check): a mutant the check catches is
# killed, one it misses survives (exit 1), a stale or duplicated entry is refused (exit 2), a
# failing baseline stops the run (exit 1), a terminated run restores the mutated file, and the
# checkout itself is never modified.
set -euo pipefail
harness="$(cd "$(dirname "$0")" && pwd)/run.py"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_mutation_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The harness gives each command a TMPDIR of its own, which a run killed outright (below)
# cannot remove: inside $tmp, it goes with the rest.
export TMPDIR=$tmp
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"  # fail, expect_in, expect_code

toy=$tmp/toy
mkdir -p "$toy/tests/mutation"
cat > "$toy/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(toy CXX)
add_executable(calc calc.cc)
EOF
cat > "$toy/calc.cc" <<'EOF'
#include <cstdio>
int add(int a, int b) {
  return a + b;
}
int twice(int x) {
  return x * 2;
}
int main() {
  std::printf("%d\n", twice(2));  // printed, never checked
  return add(2, 3) == 5 ? 0 : 1;
}
EOF
cat > "$toy/tests/mutation/mutants.txt" <<'EOF'
# two mutants: the check sees the first only
[caught]
file: calc.cc
what: subtraction for addition
build: calc
run: ./calc
- return a + b;
+ return a - b;

[missed]
file: calc.cc
what: thrice for twice
build: calc
run: ./calc
- return x * 2;
+ return x * 3;
EOF
git -C "$toy" init -q
git -C "$toy" add -A
git -C "$toy" -c user.name=t -c user.email=t@t commit -qm toy
pristine=$(cat "$toy/calc.cc")

# run_harness LOG ARGS...: the harness on the toy; prints its exit code.
run_harness() {
  local log=$1
  shift
  set +e
  python3 "$harness" --source "$toy" --work "$tmp/work" --jobs 2 "$@" >"$log" 2>&1
  echo $?
  set -e
}

rc=$(run_harness "$tmp/both.log" --report "$tmp/report.md")
[ "$rc" -eq 1 ] || { cat "$tmp/both.log"; fail "a surviving mutant must exit 1, got $rc"; }
grep -q '^mutation: caught: killed by exit 1' "$tmp/both.log" || { cat "$tmp/both.log"; fail "caught not killed"; }
grep -q '^mutation: missed: survived' "$tmp/both.log" || { cat "$tmp/both.log"; fail "missed not survived"; }
grep -q '^mutation: not killed: missed$' "$tmp/both.log" || fail "the survivor is not named"
grep -q '^| missed | thrice for twice | survived |' "$tmp/report.md" || fail "report lacks the survivor"
[ "$(cat "$toy/calc.cc")" = "$pristine" ] || fail "the checkout was modified"
[ "$(cat "$tmp/work/src/calc.cc")" = "$pristine" ] || fail "the copy was left mutated"

rc=$(run_harness "$tmp/one.log" caught)
[ "$rc" -eq 0 ] || { cat "$tmp/one.log"; fail "a killed mutant must exit 0, got $rc"; }
grep -q '^mutation: all 1 killed' "$tmp/one.log" || fail "no 'all killed' line"

rc=$(run_harness "$tmp/rotate.log" --rotate 1)
[ "$rc" -eq 0 ] || [ "$rc" -eq 1 ] || fail "--rotate 1 exited $rc"
head=$(git -C "$toy" rev-parse HEAD)
grep -q "^mutation: 1 mutants (rotation at commit ${head:0:10}: 1 of 2)" "$tmp/rotate.log" ||
  { cat "$tmp/rotate.log"; fail "the rotation is not named"; }
rc=$(run_harness "$tmp/both_ways.log" --rotate 1 caught)
[ "$rc" -eq 2 ] || fail "named mutants with --rotate must be refused, got $rc"

rc=$(run_harness "$tmp/unknown.log" nosuch)
[ "$rc" -eq 2 ] && grep -q "no mutant named nosuch" "$tmp/unknown.log" || fail "unknown id: exit $rc"

# A source line that changed: the stale mutant is refused before anything is built.
sed 's/return a - b;/return a * b;/; s/return a + b;/return a + b + 0;/' \
  "$toy/tests/mutation/mutants.txt" > "$tmp/stale.txt"
rc=$(run_harness "$tmp/stale.log" --mutants "$tmp/stale.txt")
[ "$rc" -eq 2 ] && grep -q "mutant 'caught': its '-' lines occur 0 times in calc.cc" "$tmp/stale.log" ||
  { cat "$tmp/stale.log"; fail "a stale mutant must be refused with exit 2, got $rc"; }
cat "$toy/tests/mutation/mutants.txt" "$toy/tests/mutation/mutants.txt" > "$tmp/twice.txt"
rc=$(run_harness "$tmp/twice.log" --mutants "$tmp/twice.txt")
[ "$rc" -eq 2 ] && grep -q "mutant 'caught' is listed twice" "$tmp/twice.log" ||
  fail "a duplicated mutant must be refused, got $rc"

# A check that fails without any mutation proves nothing: the run stops.
sed 's|^run: ./calc$|run: ./calc \&\& false|' "$toy/tests/mutation/mutants.txt" > "$tmp/broken.txt"
rc=$(run_harness "$tmp/broken.log" --mutants "$tmp/broken.txt" caught)
[ "$rc" -eq 1 ] && grep -q "the unmutated copy fails" "$tmp/broken.log" ||
  { cat "$tmp/broken.log"; fail "a failing baseline must stop the run, got $rc"; }

# Terminated while a mutant's check runs: the copy gets its file back. The check waits (for
# the signal) only when it sees the mutation, so the baseline passes at once.
cat > "$tmp/hang.txt" <<EOF
[hang]
file: calc.cc
what: a check that waits on the mutated build
build: calc
run: ./calc || { touch $tmp/started; sleep 60; }
- return a + b;
+ return a - b;
EOF
python3 "$harness" --source "$toy" --work "$tmp/work" --mutants "$tmp/hang.txt" \
  >"$tmp/hang.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [ -e "$tmp/started" ] && break; sleep 0.1; done
[ -e "$tmp/started" ] || { kill "$pid"; cat "$tmp/hang.log"; fail "the mutant's check never started"; }
grep -q 'return a - b;' "$tmp/work/src/calc.cc" || fail "the copy is not mutated while its check runs"
kill -TERM "$pid"
set +e
wait "$pid"
rc=$?
set -e
[ "$rc" -eq 143 ] || fail "a terminated run must exit 143, got $rc"
[ "$(cat "$tmp/work/src/calc.cc")" = "$pristine" ] || fail "a terminated run left the copy mutated"
pgrep -f "$tmp/started" >/dev/null && fail "the check's process outlived the run"

# Killed outright (no chance to restore): the next run restores the file and rebuilds what was
# built from the mutation, so its baseline passes and the mutant is judged on a fresh build.
rm -f "$tmp/started"
python3 "$harness" --source "$toy" --work "$tmp/work" --mutants "$tmp/hang.txt" \
  >"$tmp/killed.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [ -e "$tmp/started" ] && break; sleep 0.1; done
[ -e "$tmp/started" ] || { kill "$pid"; cat "$tmp/killed.log"; fail "the mutant's check never started"; }
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
# The orphaned check (its own session) goes too.
for group in $(pgrep -f "$tmp/started"); do kill -KILL -- "-$group" 2>/dev/null || true; done
grep -q 'return a - b;' "$tmp/work/src/calc.cc" || fail "the killed run did not leave its mutation"
rc=$(run_harness "$tmp/after_kill.log" caught)
[ "$rc" -eq 0 ] || { cat "$tmp/after_kill.log"; fail "after a killed run the next must heal, got $rc"; }
[ "$(cat "$tmp/work/src/calc.cc")" = "$pristine" ] || fail "the copy was not restored after a kill"
echo "PASS"
