#include "kernels/reference/blas_ref.h"

#include <cblas.h>

#include <algorithm>
#include <type_traits>
#include <atomic>
#include <chrono>
#include <vector>

#include "core/base/dtype.h"

namespace moe::kernels::ref {
namespace {

std::atomic<bool> g_timing{false};
std::atomic<int64_t> g_nanos{0};
std::atomic<int64_t> g_calls{0};
std::atomic<double> g_flops{0};

// Times the enclosing BLAS call when timing is on.
class GemmTimer {
 public:
  GemmTimer(int64_t m, int64_t n, int64_t k) : on_(g_timing.load(std::memory_order_relaxed)) {
    if (!on_) return;
    flops_ = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    start_ = std::chrono::steady_clock::now();
  }
  ~GemmTimer() {
    if (!on_) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - start_).count();
    g_nanos.fetch_add(ns, std::memory_order_relaxed);
    g_calls.fetch_add(1, std::memory_order_relaxed);
    double old = g_flops.load(std::memory_order_relaxed);
    while (!g_flops.compare_exchange_weak(old, old + flops_, std::memory_order_relaxed)) {
    }
  }

 private:
  bool on_;
  double flops_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

void set_gemm_timing(bool enabled) { g_timing = enabled; }

GemmCounters gemm_counters() {
  GemmCounters c;
  c.seconds = static_cast<double>(g_nanos.load()) * 1e-9;
  c.calls = g_calls.load();
  c.flops = g_flops.load();
  return c;
}

void reset_gemm_counters() {
  g_nanos = 0;
  g_calls = 0;
  g_flops = 0;
}

template <>
void gemm<float>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                 int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.f : beta * c[i * ldc + j];
    return;
  }
  GemmTimer timer(m, n, k);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

template <>
void gemm<double>(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                  const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                  double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0 : beta * c[i * ldc + j];
    return;
  }
  GemmTimer timer(m, n, k);
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

namespace {

// A row-major [rows, cols] slice of a bf16 matrix with leading dimension ld, widened to f32.
std::vector<float> widen(const bf16* p, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = static_cast<float>(p[i * ld + j]);
  return out;
}

}  // namespace

template <typename T, typename C>
void gemm_mixed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                const T* a, int64_t lda, const T* b, int64_t ldb, double beta, C* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (m == 0 || n == 0) return;
    const std::vector<float> wa = widen(a, trans_a ? k : m, trans_a ? m : k, lda);
    const std::vector<float> wb = widen(b, trans_b ? n : k, trans_b ? k : n, ldb);
    if constexpr (std::is_same_v<C, float>) {
      gemm<float>(trans_a, trans_b, m, n, k, static_cast<float>(alpha), wa.data(),
                  trans_a ? m : k, wb.data(), trans_b ? k : n, static_cast<float>(beta), c, ldc);
    } else {
      std::vector<float> wc(static_cast<size_t>(m * n));
      if (beta != 0) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) wc[i * n + j] = static_cast<float>(c[i * ldc + j]);
      }
      gemm<float>(trans_a, trans_b, m, n, k, static_cast<float>(alpha), wa.data(),
                  trans_a ? m : k, wb.data(), trans_b ? k : n, static_cast<float>(beta),
                  wc.data(), n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = static_cast<C>(wc[i * n + j]);
    }
  } else {
    static_assert(std::is_same_v<T, C>, "full-precision products keep their dtype");
    gemm<T>(trans_a, trans_b, m, n, k, static_cast<T>(alpha), a, lda, b, ldb, static_cast<T>(beta),
            c, ldc);
  }
}

template void gemm_mixed<float, float>(bool, bool, int64_t, int64_t, int64_t, double, const float*,
                                       int64_t, const float*, int64_t, double, float*, int64_t);
template void gemm_mixed<double, double>(bool, bool, int64_t, int64_t, int64_t, double,
                                         const double*, int64_t, const double*, int64_t, double,
                                         double*, int64_t);
template void gemm_mixed<bf16, bf16>(bool, bool, int64_t, int64_t, int64_t, double, const bf16*,
                                     int64_t, const bf16*, int64_t, double, bf16*, int64_t);
template void gemm_mixed<bf16, float>(bool, bool, int64_t, int64_t, int64_t, double, const bf16*,
                                      int64_t, const bf16*, int64_t, double, float*, int64_t);

}  // namespace moe::kernels::ref
