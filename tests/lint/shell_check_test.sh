#!/usr/bin/env bash
# shell_check.sh can fail: on a tree of clean scripts it passes, and one script with a warning
# (an unquoted command substitution, `[ p -o q ]`) fails it naming the file.
set -euo pipefail
check="$(cd "$(dirname "$0")" && pwd)/shell_check.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_shell_check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts" "$tmp/tests" "$tmp/docker" "$tmp/.ci"
for i in $(seq 11); do printf '#!/usr/bin/env bash\necho "%s"\n' "$i" > "$tmp/scripts/ok$i.sh"; done
printf '#!/usr/bin/env bash\nexec true\n' > "$tmp/.ci/run"
"$check" "$tmp" > "$tmp/clean.log" 2>&1 || { cat "$tmp/clean.log"; echo "FAIL: clean scripts refused"; exit 1; }
printf '#!/usr/bin/env bash\nrm $(cat list)\n[ -n "$1" -o -n "$2" ]\n' > "$tmp/tests/bad.sh"
if "$check" "$tmp" > "$tmp/bad.log" 2>&1; then
  cat "$tmp/bad.log"; echo "FAIL: a script with warnings passed"; exit 1
fi
grep -q "tests/bad.sh" "$tmp/bad.log" || { cat "$tmp/bad.log"; echo "FAIL: the file is not named"; exit 1; }
echo "PASS"
