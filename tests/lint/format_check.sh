#!/usr/bin/env bash
# Every C++ and CUDA source of the repository is formatted with the repo's .clang-format:
# clang-format --dry-run -Werror over base/, io/, types/, kernels/, comm/, proto/, core/,
# launcher/, benchmarks/ and tests/ (generated and third-party code lives in the build directory,
# not here). A deviation prints clang-format's diagnostics and exits 1: run
#   clang-format -i $(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
# Without clang-format (Debian's clang-format, which scripts/install_deps.sh installs) it exits 1
# saying so. The version matters (each release formats a little differently): the tree is
# formatted with Debian 12's clang-format 14, and another major version is refused by name.
# Usage: format_check.sh [ROOT]   (default: the repository root).
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
want_major=14
if ! command -v clang-format > /dev/null; then
  echo "format_check: clang-format is not installed (apt-get install clang-format," \
       "or run scripts/install_deps.sh)" >&2
  exit 1
fi
major=$(clang-format --version | sed -n 's/.*clang-format version \([0-9]*\).*/\1/p')
if [ "$major" != "$want_major" ]; then
  echo "format_check: clang-format $major here; the tree is formatted with version" \
       "$want_major (Debian 12's clang-format), whose output differs: install that one" >&2
  exit 1
fi
files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
  find "$root/base" "$root/io" "$root/types" "$root/kernels" "$root/comm" "$root/proto" \
       "$root/core" "$root/launcher" "$root/benchmarks" "$root/tests" \
       \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) -type f -print0)
[ ${#files[@]} -gt 100 ] || { echo "format_check: found only ${#files[@]} sources under $root" >&2; exit 1; }
clang-format --style=file --dry-run -Werror "${files[@]}"
echo "format_check: ${#files[@]} sources, formatted"
