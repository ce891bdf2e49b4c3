#include "kernels/cpu/sgemm_accuracy.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/rng.h"
#include "kernels/cpu/blas_library.h"

namespace moe::kernels::ref {
namespace {

constexpr double kUnitRoundoff = 0x1p-24;
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS's enum values

// Element (i, j) of op(X) for X stored row-major as [rows, cols] (op: transpose or not).
inline float at(const std::vector<float>& x, bool trans, int64_t cols_stored, int64_t i,
                int64_t j) {
  return trans ? x[static_cast<size_t>(j * cols_stored + i)]
               : x[static_cast<size_t>(i * cols_stored + j)];
}

}  // namespace

std::vector<GemmShape> momoe_gemm_shapes(int64_t max_rows) {
  const int64_t rows = max_rows;
  std::vector<GemmShape> s;
  // Quick start: T = 16 x 64 tokens, D = F = 128, E = 8, V = 10000, heads of 32 over 64 positions.
  s.push_back({"quickstart qkv", rows, 384, 128, false, false});
  s.push_back({"quickstart attention scores", 64, 64, 32, false, true});
  s.push_back({"quickstart attention context", 64, 32, 64, false, false});
  s.push_back({"quickstart router", rows, 8, 128, false, false});
  s.push_back({"quickstart expert fc1", rows, 128, 128, false, false});
  s.push_back({"quickstart head", 64, 10000, 128, false, true});
  s.push_back({"quickstart head backward (dX)", 64, 128, 10000, false, false});
  s.push_back({"quickstart expert weight grad", 128, 128, 1024, true, false});
  // smoe-medium: D = F = 352, 16 experts, 4 x 512 tokens, heads of 44 over 512 positions.
  s.push_back({"smoe-medium qkv", rows, 1056, 352, false, false});
  s.push_back({"smoe-medium attention scores", 128, 512, 44, false, true});
  s.push_back({"smoe-medium attention context", 128, 44, 512, false, false});
  s.push_back({"smoe-medium expert fc2", rows, 352, 352, false, false});
  s.push_back({"smoe-medium input grad", rows, 352, 1056, false, true});
  s.push_back({"smoe-medium weight grad", 352, 352, 2048, true, false});
  return s;
}

double bound_ratio(int64_t k) {
  const double ku = static_cast<double>(k) * kUnitRoundoff;
  return (ku / (1 - ku) + kUnitRoundoff) / kUnitRoundoff;
}

SgemmAccuracy measure_sgemm(const GemmShape& shape, uint64_t seed, double timing_seconds) {
  const int64_t m = shape.m, n = shape.n, k = shape.k;
  // Stored shapes: A is [M, K] or, transposed, [K, M]; B is [K, N] or [N, K].
  const int64_t a_cols = shape.trans_a ? m : k, b_cols = shape.trans_b ? k : n;
  std::vector<float> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  std::vector<float> c(static_cast<size_t>(m * n), 0.f);
  const CounterRng rng{seed, make_stream(RngTag::kTest, 11, 0)};
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(2 * rng.uniform(i) - 1);
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = static_cast<float>(2 * rng.uniform(a.size() + i) - 1);
  const SgemmFn sgemm = blas_functions().sgemm;
  auto run = [&] {
    sgemm(kRowMajor, shape.trans_a ? kTrans : kNoTrans, shape.trans_b ? kTrans : kNoTrans,
          static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a.data(),
          static_cast<int>(a_cols), b.data(), static_cast<int>(b_cols), 0.0f, c.data(),
          static_cast<int>(n));
  };
  run();
  SgemmAccuracy r;
  r.shape = shape;
  r.bound = bound_ratio(k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, magnitude = 0;
      for (int64_t q = 0; q < k; ++q) {
        const double p = static_cast<double>(at(a, shape.trans_a, a_cols, i, q)) *
                         static_cast<double>(at(b, shape.trans_b, b_cols, q, j));
        exact += p;
        magnitude += std::fabs(p);
      }
      const double err = std::fabs(static_cast<double>(c[static_cast<size_t>(i * n + j)]) - exact);
      const double ratio =
          magnitude > 0 ? err / (kUnitRoundoff * magnitude) : (err > 0 ? INFINITY : 0);
      if (!(ratio <= r.ratio)) r.ratio = std::isnan(ratio) ? INFINITY : ratio;
    }
  }
  if (timing_seconds > 0) {
    int64_t calls = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double elapsed = 0;
    while (elapsed < timing_seconds) {
      run();
      ++calls;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    r.gflops = 2.0 * static_cast<double>(m * n * k) * static_cast<double>(calls) / elapsed / 1e9;
  }
  return r;
}

}  // namespace moe::kernels::ref
