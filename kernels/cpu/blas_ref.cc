#include "kernels/cpu/blas_ref.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <type_traits>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/cpu/blas_library.h"

namespace moe::kernels::ref {
namespace {

std::atomic<bool> g_timing{false};
std::atomic<int64_t> g_nanos{0};
std::atomic<int64_t> g_calls{0};
std::atomic<double> g_flops{0};

// How a product C[M, N] is cut into tiles, each one BLAS call: from M, N and K and whether the
// call is already inside a parallel_for body (then it stays whole: attention heads, expert
// blocks), never from the thread count, so a tile's bits (and C's) are the same at any thread
// count. Products under ~8 MFLOP stay whole; larger ones are cut into up to 16 tiles, rows first
// (row tiles of C are contiguous, at least 32 rows), then columns in multiples of 16.
struct Tiling {
  int64_t rows_per_tile = 0, cols_per_tile = 0, row_tiles = 1, col_tiles = 1;
  int64_t tiles() const { return row_tiles * col_tiles; }
};

Tiling tiling_for(int64_t m, int64_t n, int64_t k) {
  const ThreadPool* pool = current_thread_pool();
  const bool fine = pool != nullptr && pool->fine_grained();  // tests: tiles at small shapes
  const double kTileFlops = fine ? 1.0e3 : 8.0e6;
  constexpr int64_t kMaxTiles = 16;
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int64_t want =
      in_parallel_region()
          ? 1
          : std::clamp<int64_t>(static_cast<int64_t>(flops / kTileFlops), 1, kMaxTiles);
  const int64_t tm = std::clamp<int64_t>(m / (fine ? 2 : 32), 1, want);
  const int64_t tn = std::clamp<int64_t>(n / (fine ? 16 : 64), 1, std::max<int64_t>(1, want / tm));
  Tiling t;
  t.rows_per_tile = (m + tm - 1) / tm;
  t.cols_per_tile = tn == 1 ? n : ((n + tn - 1) / tn + 15) / 16 * 16;
  t.row_tiles = (m + t.rows_per_tile - 1) / t.rows_per_tile;
  t.col_tiles = (n + t.cols_per_tile - 1) / t.cols_per_tile;
  return t;
}

// Runs blas(m, n, a, b, c) once per tile of C on the current thread pool, with a, b and c offset
// to the tile (op(A) rows i0.., op(B) columns j0..).
// param-count: CBLAS's argument list, kept by design (docs/architecture.md)
template <typename T, typename Blas>
void tiled(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
           const T* b, int64_t ldb, T* c, int64_t ldc, Blas&& blas) {
  const Tiling t = tiling_for(m, n, k);
  parallel_for(t.tiles(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t tile = begin; tile < end; ++tile) {
      const int64_t i0 = (tile / t.col_tiles) * t.rows_per_tile;
      const int64_t j0 = (tile % t.col_tiles) * t.cols_per_tile;
      const int64_t mi = std::min(t.rows_per_tile, m - i0);
      const int64_t nj = std::min(t.cols_per_tile, n - j0);
      blas(mi, nj, a + (trans_a ? i0 : i0 * lda), b + (trans_b ? j0 * ldb : j0), c + i0 * ldc + j0);
    }
  });
}

}  // namespace

ScopedGemmTimer::ScopedGemmTimer(double flops)
    : on_(g_timing.load(std::memory_order_relaxed) && !in_parallel_region()), flops_(flops) {
  if (on_) start_ = std::chrono::steady_clock::now();
}

ScopedGemmTimer::~ScopedGemmTimer() {
  if (!on_) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now() - start_)
                      .count();
  g_nanos.fetch_add(ns, std::memory_order_relaxed);
  g_calls.fetch_add(1, std::memory_order_relaxed);
  double old = g_flops.load(std::memory_order_relaxed);
  while (!g_flops.compare_exchange_weak(old, old + flops_, std::memory_order_relaxed)) {
  }
}

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

namespace {

// CBLAS's enum values (the same in every CBLAS: OpenBLAS, BLIS, MKL).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

// One row-major CBLAS product (a tile of a larger one, or the whole), by the loaded library,
// which runs single-threaded inside (blas_library.h): the pool is the only parallelism, so the
// thread count cannot change how a product is cut.
// param-count: CBLAS's argument list, kept by design (docs/architecture.md)
template <typename T>
void cblas_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const BlasFunctions& blas = blas_functions();
  auto product = [&](auto fn) {
    fn(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, static_cast<int>(m),
       static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
       static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
  };
  if constexpr (std::is_same_v<T, float>) {
    product(blas.sgemm);
  } else {
    product(blas.dgemm);
  }
}

}  // namespace

// param-count: CBLAS's argument list, kept by design (docs/architecture.md)
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? T(0) : beta * c[i * ldc + j];
    return;
  }
  ScopedGemmTimer timer(2.0 * static_cast<double>(m) * static_cast<double>(n) *
                        static_cast<double>(k));
  tiled<T>(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc,
           [&](int64_t mi, int64_t nj, const T* ai, const T* bj, T* cij) {
             cblas_gemm<T>(trans_a, trans_b, mi, nj, k, alpha, ai, lda, bj, ldb, beta, cij, ldc);
           });
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);

namespace {

// A row-major [rows, cols] slice of a bf16 matrix with leading dimension ld, widened to f32.
std::vector<float> widen(const bf16* p, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t i = begin; i < end; ++i)
                   for (int64_t j = 0; j < cols; ++j)
                     out[i * cols + j] = static_cast<float>(p[i * ld + j]);
               });
  return out;
}

}  // namespace

// param-count: CBLAS's argument list, kept by design (docs/architecture.md)
template <typename T, typename C>
void gemm_mixed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                const T* a, int64_t lda, const T* b, int64_t ldb, double beta, C* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, bf16>) {
    if (m == 0 || n == 0) return;
    const std::vector<float> wa = widen(a, trans_a ? k : m, trans_a ? m : k, lda);
    const std::vector<float> wb = widen(b, trans_b ? n : k, trans_b ? k : n, ldb);
    if constexpr (std::is_same_v<C, float>) {
      gemm<float>(trans_a, trans_b, m, n, k, static_cast<float>(alpha), wa.data(), trans_a ? m : k,
                  wb.data(), trans_b ? k : n, static_cast<float>(beta), c, ldc);
    } else {
      std::vector<float> wc(static_cast<size_t>(m * n));
      if (beta != 0) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) wc[i * n + j] = static_cast<float>(c[i * ldc + j]);
      }
      gemm<float>(trans_a, trans_b, m, n, k, static_cast<float>(alpha), wa.data(), trans_a ? m : k,
                  wb.data(), trans_b ? k : n, static_cast<float>(beta), wc.data(), n);
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
