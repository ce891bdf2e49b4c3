// How accurately the loaded BLAS's sgemm computes momoe's own GEMM shapes: each product of f32
// operands against the same product summed exactly enough in f64 (the products of two floats are
// exact in double; the sums' error is ~K 2^-53, far below float32's). The answer to "is this
// OpenBLAS kernel correct on this CPU": a correct sgemm meets the classical bound of any
// summation order (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Thm 3.5 with
// the output's own rounding),
//     |fl(A B)_ij - (A B)_ij| <= (gamma_K + u) sum_k |A_ik| |B_kj|,  gamma_K = K u / (1 - K u),
// u = 2^-24. `ratio` is the worst |error| / (u sum_k |A_ik||B_kj|), so the bound is K + 1 (about;
// bound_ratio() is exact); blocked and FMA kernels land near sqrt(K) or below. A kernel that
// computes wrongly on this CPU (a broken instruction path) exceeds it by orders of magnitude.
// Measured by momoe-bench sgemm (docs/blas_kernels.md) and asserted by blas_library_test under
// every kernel tests/run.sh runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe::kernels::ref {

struct GemmShape {
  std::string name;  // where momoe multiplies this shape, e.g. "quickstart qkv"
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
};

// The GEMMs of a training step at the quick start's size (T = 1024 tokens, D = F = 128, E = 8,
// V = 10000, 4 heads over 64 positions) and at smoe-medium's (D = F = 352, 16 experts, 2048
// tokens), forward and backward (weight gradients are A^T B with K = tokens). The output head's
// and the vocabulary's rows are cut to `max_rows` (the f64 reference is a plain triple loop).
std::vector<GemmShape> momoe_gemm_shapes(int64_t max_rows = 256);

struct SgemmAccuracy {
  GemmShape shape;
  double ratio = 0;                           // worst |error| / (u sum |a||b|) over the output
  double bound = 0;                           // bound_ratio(k)
  double gflops = 0;                          // sgemm's rate on this shape (0 when not timed)
  bool ok() const { return ratio <= bound; }  // false for NaN too
};

// (gamma_K + u) / u: the bound on `ratio` for a K-term product.
double bound_ratio(int64_t k);

// Measures the loaded library's cblas_sgemm (single-threaded, as momoe calls it) on `shape`
// with operands uniform in [-1, 1) drawn from `seed`; `timing_seconds` > 0 also times it.
SgemmAccuracy measure_sgemm(const GemmShape& shape, uint64_t seed, double timing_seconds = 0);

}  // namespace moe::kernels::ref
