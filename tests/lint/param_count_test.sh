#!/usr/bin/env bash
# param_count.py can fail: a host function, a __global__ kernel and a member function of 9
# parameters are each named with their count; 8 parameters pass, and so do calls, lambdas, macros,
# explicit instantiations and a declaration marked '// param-count: <why>'.
set -euo pipefail
# shellcheck source=../testing/shell_helpers.sh
source "$(dirname "$0")/../testing/shell_helpers.sh"
check="$(cd "$(dirname "$0")" && pwd)/param_count.py"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/momoe_params.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kernels"
cat > "$tmp/kernels/ok.cc" << 'EOF'
#define WIDE_MACRO(a, b, c, d, e, f, g, h, i) ((a) + (b) + (c) + (d) + (e) + (f) + (g) + (h) + (i))
namespace moe {
int eight(int a, int b, int c, int d, int e, int f, int g, int h);
int calls(int x) {
  auto lambda = [](int a, int b, int c, int d, int e, int f, int g, int h, int i) { return a + i; };
  const int y = eight(x, x, x, x, x, x, x, WIDE_MACRO(x, x, x, x, x, x, x, x, x));
  return lambda(y, x, x, x, x, x, x, x, x);
}
template <typename T>
T sum(std::function<T(T, T, T, T, T, T, T, T, T)> fn, T a);
template float sum<float>(std::function<float(float, float, float, float, float, float, float,
                                              float, float)>, float);
REGISTER_OP(wide, 1, 2, 3, 4, 5, 6, 7, 8, 9);
// param-count: an external API's argument list
void cblas_like(int a, int b, int c, int d, int e, int f, int g, int h, int i);
}  // namespace moe
EOF
python3 "$check" "$tmp" kernels > "$tmp/clean.log" 2>&1 ||
  { cat "$tmp/clean.log"; fail "8 parameters, calls, lambdas or macros refused"; }
cat > "$tmp/kernels/bad.cu" << 'EOF'
namespace moe {
void host_nine(int a, int b, int c, int d, int e, int f, int g, int h,
               int i);
template <typename T>
__global__ void kernel_nine(const T* a, const T* b, const T* c, const T* d, const T* e, T* f,
                            int64_t n, int64_t m, T* out) {
  out[0] = a[0];
}
class Op {
 public:
  Status member_nine(int a, int b, int c, int d, int e, int f, int g, int h, int i) const;
};
}  // namespace moe
EOF
if python3 "$check" "$tmp" kernels > "$tmp/bad.log" 2>&1; then
  cat "$tmp/bad.log"
  fail "9-parameter functions passed"
fi
expect_in "$tmp/bad.log" "kernels/bad.cu:2: 9 parameters: host_nine"
expect_in "$tmp/bad.log" "kernels/bad.cu:4: 9 parameters: kernel_nine"
expect_in "$tmp/bad.log" "kernels/bad.cu:11: 9 parameters: member_nine"
expect_in "$tmp/bad.log" "param_count: 3 function(s) with more than 8 parameters"
echo "PASS"
