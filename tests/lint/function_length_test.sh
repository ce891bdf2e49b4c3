#!/usr/bin/env bash
# function_length.py can fail: an 81-line function is named with its length; 80 lines pass, and
# so does a long table marked '// function-length: table'.
set -euo pipefail
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"
check="$(cd "$(dirname "$0")" && pwd)/function_length.py"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_fnlen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/core"
# body N: a function whose body spans N lines from its opening line to its closing brace.
body() {
  echo "int $1(int x) {"
  for _ in $(seq $(($2 - 2))); do echo "  x += 1;"; done
  echo "  return x;"
  echo "}"
}
{ body short 79; echo; echo "// function-length: table (one line per field)"; body table 200; } \
  > "$tmp/core/ok.cc"
python3 "$check" "$tmp" core > "$tmp/clean.log" 2>&1 || { cat "$tmp/clean.log"; fail "short functions refused"; }
body too_long 80 > "$tmp/core/bad.cc"
if python3 "$check" "$tmp" core > "$tmp/bad.log" 2>&1; then cat "$tmp/bad.log"; fail "an 81-line function passed"; fi
expect_in "$tmp/bad.log" "core/bad.cc:1: 81 lines: int too_long(int x) {"
echo "PASS"
