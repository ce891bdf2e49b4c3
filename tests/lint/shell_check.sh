#!/usr/bin/env bash
# Runs shellcheck, at severity warning, over every shell script of the repository: scripts/, tests/
# (the system tests included), docker/ and the CI entry point. Info and style notes are not
# gated. A finding prints shellcheck's report and exits 1; without shellcheck (Debian's
# `shellcheck`, which scripts/install_deps.sh installs) it exits 1 saying so.
# Usage: shell_check.sh [ROOT]   (default: the repository root).
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
if ! command -v shellcheck > /dev/null; then
  echo "shell_check: shellcheck is not installed (apt-get install shellcheck," \
       "or run scripts/install_deps.sh)" >&2
  exit 1
fi
files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
  find "$root/scripts" "$root/tests" "$root/docker" -name '*.sh' -type f -print0)
files+=("$root/.ci/run")
[ ${#files[@]} -gt 10 ] || { echo "shell_check: found only ${#files[@]} scripts under $root" >&2; exit 1; }
shellcheck -S warning "${files[@]}"
echo "shell_check: ${#files[@]} scripts, no warnings"
