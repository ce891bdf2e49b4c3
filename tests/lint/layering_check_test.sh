#!/usr/bin/env bash
# layering_check.sh can fail: on a tree whose includes run down the layers it passes; an include
# up the layers (core/layers -> core/train, core/data -> launcher), a generated protobuf header
# in core/, a config type that includes a kernel and MPI in base/ each fail it, named by file and line.
set -euo pipefail
check="$(cd "$(dirname "$0")" && pwd)/layering_check.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_layering.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for d in base io types kernels/cpu kernels/cuda kernels comm proto core/data core/layers \
         core/model core/optim core/checkpoint core/compare core/train core/inference launcher; do
  mkdir -p "$tmp/$d"
done
printf '#include "base/status.h"\n#include "kernels/router.h"\n#include "comm/communicator.h"\n' \
  > "$tmp/core/layers/ok.cc"
printf '#include "core/layers/ok.h"\n#include <vector>\n' > "$tmp/core/model/ok.cc"
"$check" "$tmp" > "$tmp/clean.log" 2>&1 || { cat "$tmp/clean.log"; echo "FAIL: a clean tree refused"; exit 1; }
printf '#include "base/status.h"\n#include "core/train/trainer.h"\n' > "$tmp/core/layers/up.cc"
printf '#include "launcher/flags.h"\n' > "$tmp/core/data/up.h"
printf '#include "proto/moe.pb.h"\n' > "$tmp/core/checkpoint/pb.cc"
printf '#include <mpi.h>\n' > "$tmp/base/mpi.cc"
printf '#include "kernels/router.h"\n' > "$tmp/types/up.h"
if "$check" "$tmp" > "$tmp/bad.log" 2>&1; then
  cat "$tmp/bad.log"; echo "FAIL: includes up the layers passed"; exit 1
fi
for want in "core/layers/up.cc:2: includes core/train/trainer.h (core/train)" \
            "core/data/up.h:1: includes launcher/flags.h (launcher)" \
            "core/checkpoint/pb.cc:1:" "base/mpi.cc:1:" \
            "types/up.h:1: includes kernels/router.h (kernels)"; do
  grep -qF "$want" "$tmp/bad.log" || { cat "$tmp/bad.log"; echo "FAIL: not named: $want"; exit 1; }
done
echo "PASS"
