#!/usr/bin/env bash
# The layer order of docs/architecture.md, checked over the includes: each folder includes only
# its own headers and those of the layers below it. The core targets link the same way
# (core/CMakeLists.txt), but an include of a header-only piece from above would still build; this
# check refuses it. Also: generated protobuf headers (*.pb.h) only inside proto/, and MPI and
# NCCL headers only inside comm/ (and the tests and benchmarks that drive MPI directly).
# Usage: layering_check.sh [ROOT]   (default: the repository root). Exit 1 lists each violation
# as file:line: what it includes, and what that folder may include.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}

# folder: the include prefixes it may use besides its own (one line each, lower layers first).
rules=(
  "base:"
  "io:base"
  "types:base"
  "kernels/cpu:base types kernels"
  "kernels/cuda:base types kernels kernels/cpu"
  "kernels:base types kernels/cpu kernels/cuda"
  "comm:base types"
  "proto:base io types"
  "core/data:base io types"
  "core/layers:base types kernels comm"
  "core/model:base types kernels comm core/layers"
  "core/optim:base types kernels comm core/layers core/model"
  "core/checkpoint:base io types kernels comm proto core/data core/layers core/model core/optim"
  "core/train:base io types kernels kernels/cpu comm proto core/data core/layers core/model core/optim core/checkpoint"
  "core/compare:base io types proto"
  "core/inference:base io types kernels kernels/cpu comm proto core/data core/layers core/model core/optim core/checkpoint core/train"
)
# Above every rule folder: never included from them.
tops=(launcher benchmarks tests python)
# The folder an include path belongs to: the longest rule folder (or top) that prefixes it.
folder_of() {
  local path=$1 best="" f
  for f in "${rules[@]%%:*}" "${tops[@]}"; do
    case "$path" in "$f"/*) [ ${#f} -gt ${#best} ] && best=$f ;; esac
  done
  echo "$best"
}

status=0
for rule in "${rules[@]}"; do
  dir=${rule%%:*}
  allowed=" $dir ${rule#*:} "
  [ -d "$root/$dir" ] || { echo "layering_check: no directory $root/$dir" >&2; exit 2; }
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    inc=$(sed -n 's/^[[:space:]]*#include "\([^"]*\)".*/\1/p' <<< "${rest#*:}")
    target=$(folder_of "$inc")
    [ -n "$target" ] || continue  # not a layered folder (a third-party or generated header)
    # A file in a sub-folder that has its own rule is checked by that rule.
    own=$(folder_of "${file#"$root"/}")
    [ "$own" = "$dir" ] || continue
    case "$allowed" in *" $target "*) ;; *)
      echo "${file#"$root"/}:$line: includes $inc ($target), but $dir may include only:${allowed% }"
      status=1 ;;
    esac
  done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' \
             '^[[:space:]]*#include "' "$root/$dir" || true)
done

# Generated protobuf headers stay behind proto/'s converters; MPI and NCCL behind comm/.
while IFS= read -r hit; do
  [ -n "$hit" ] || continue
  echo "${hit#"$root"/}: a generated protobuf header outside proto/ (use proto/*_convert.h)"
  status=1
done < <(grep -rn --include='*.h' --include='*.cc' '#include "[^"]*\.pb\.h"' \
           "$root/base" "$root/io" "$root/types" "$root/core" "$root/kernels" "$root/comm" "$root/launcher" "$root/benchmarks" || true)
while IFS= read -r hit; do
  [ -n "$hit" ] || continue
  echo "${hit#"$root"/}: MPI or NCCL outside comm/ (use comm/communicator.h)"
  status=1
done < <(grep -rn --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' \
           -E '#include [<"](mpi|nccl)\.h[>"]' "$root/base" "$root/io" "$root/types" "$root/core" "$root/kernels" "$root/proto" \
           "$root/launcher" || true)
[ "$status" -eq 0 ] && echo "layering_check: every include runs down the layers"
exit "$status"
