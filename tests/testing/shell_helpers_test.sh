#!/usr/bin/env bash
# shell_helpers.sh: each helper passes what it should and fails (exit 1, a FAIL line on stderr
# naming the expectation) on what it should not.
set -u
# shellcheck source=shell_helpers.sh
source "$(dirname "$0")/shell_helpers.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_shell_helpers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export EXPECT_DIR=$tmp
check() {  # check WANT-RC STDERR-TEXT COMMAND...: in a subshell; "" = nothing on stderr
  local want=$1 text=$2 rc
  shift 2
  ("$@") > "$tmp/log.out" 2> "$tmp/log.err"
  rc=$?
  [ "$rc" -eq "$want" ] || { cat "$tmp/log.out" "$tmp/log.err"; echo "FAIL: '$*' exited $rc, not $want"; exit 1; }
  if [ -z "$text" ]; then
    [ ! -s "$tmp/log.err" ] || { cat "$tmp/log.err"; echo "FAIL: '$*' printed on stderr"; exit 1; }
  else
    grep -qF -- "$text" "$tmp/log.err" || { cat "$tmp/log.err"; echo "FAIL: '$*' did not say '$text'"; exit 1; }
  fi
}
printf 'alpha\nbeta\n' > "$tmp/file"
check 0 "" expect_in "$tmp/file" "beta"
check 1 "FAIL: 'gamma' not in $tmp/file" expect_in "$tmp/file" "gamma"
check 0 "" expect_code 3 "boom" sh -c 'echo boom >&2; exit 3'
check 0 "" expect_code 2 "on stdout" sh -c 'echo on stdout; exit 2'
check 1 "exited 0, expected 3" expect_code 3 "boom" sh -c 'echo boom >&2'
check 1 "did not mention 'bang'" expect_code 3 "bang" sh -c 'echo boom >&2; exit 3'
check 1 "FAIL: plain" fail plain
FAIL_CONTEXT=lock check 1 "FAIL [lock]: with context" fail with context
echo "PASS"
