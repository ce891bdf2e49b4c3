#!/usr/bin/env bash
# The rule must catch what it forbids: a planted host access, a planted wait and a host-side
# allocation in copies of core/layers and core/model are each reported (exit 1, naming the file
# and line), while comments and `host-ok` lines pass.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/core/layers" "$tmp/core/model"
cat > "$tmp/core/layers/fine.cc" <<'CC'
// x.data<float>() in a comment is fine
Status f(Context& ctx, const Tensor& x) { return kernels::scale(ctx, x, 2.0); }
const int64_t* n = host.data<int64_t>();  // host-ok: a read-back copy
CC
cp "$tmp/core/layers/fine.cc" "$tmp/core/model/fine.cc"
"$here/device_neutral_check.sh" "$tmp" > /dev/null || { echo "clean tree reported"; exit 1; }
check_caught() {  # file, content, expected pattern
  printf '%s\n' "$2" > "$tmp/$1"
  if out=$("$here/device_neutral_check.sh" "$tmp" 2>/dev/null); then
    echo "not caught: $2"; exit 1
  fi
  echo "$out" | grep -qF "$1:1: '$3'" || { echo "wrong report for $2: $out"; exit 1; }
  rm "$tmp/$1"
}
check_caught core/layers/bad.cc '  float v = y.data<float>()[0];' '\.data<'
check_caught core/model/bad.cc '  MOE_RETURN_IF_ERROR(ctx_.synchronize());' 'synchronize\('
check_caught core/layers/bad.cc '  Tensor t = Tensor::empty({4}, DType::kF32);' 'Tensor::empty\('
check_caught core/model/bad.cc '  std::memcpy(a, b, n);' 'memcpy'
check_caught core/layers/bad.cc '  auto h = ctx_.read_back(x);' 'read_back\('
echo "device_neutral_check catches every planted violation"
