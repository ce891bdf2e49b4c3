#!/usr/bin/env bash
# format_check.sh can fail: a tree with one badly formatted file is refused, naming the file;
# the same tree formatted passes.
set -euo pipefail
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"
check="$(cd "$(dirname "$0")" && pwd)/format_check.sh"
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_format.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cp "$root/.clang-format" "$tmp/"
for d in base io types kernels comm proto core launcher benchmarks tests; do mkdir -p "$tmp/$d"; done
# Enough sources that the check does not refuse the tree as empty.
for i in $(seq 101); do printf 'int f%d() { return %d; }\n' "$i" "$i" > "$tmp/base/f$i.cc"; done
"$check" "$tmp" > "$tmp/clean.log" 2>&1 || { cat "$tmp/clean.log"; fail "a formatted tree refused"; }
printf 'int   g( int a ){return a;}\n' > "$tmp/core/bad.cc"
if "$check" "$tmp" > "$tmp/bad.log" 2>&1; then cat "$tmp/bad.log"; fail "a badly formatted file passed"; fi
expect_in "$tmp/bad.log" "core/bad.cc"
clang-format -i --style=file "$tmp/core/bad.cc"
"$check" "$tmp" > "$tmp/fixed.log" 2>&1 || { cat "$tmp/fixed.log"; fail "the formatted file still refused"; }
echo "PASS"
