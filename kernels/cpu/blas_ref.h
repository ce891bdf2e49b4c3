// Typed wrappers over CBLAS (the library blas_library.h loads) for row-major GEMM, for f32 and f64,
// and the bf16 product (operands widened to f32 tiles, f32 accumulation: Debian's OpenBLAS is built
// without sbgemm). These are the CPU backend's matrix products; the naive triple loop lives only
// in the tests as the oracle.
#pragma once

#include <chrono>
#include <cstdint>

namespace moe::kernels::ref {

// C[M, N] = alpha * op(A) op(B) + beta * C, row-major with leading dimensions lda, ldb, ldc.
// op(A) is [M, K]: A is [M, K] (lda >= K) or, transposed, [K, M] (lda >= M). Likewise B.
// param-count: CBLAS's argument list, kept by design (docs/architecture.md)
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// C[M, N] = alpha * op(A) op(B) + beta * C for inputs of type T (float, double or bf16) and an
// output of type C: C = T, or C = float when T = bf16 (an fp32 output, e.g. weight gradients).
// bf16 inputs are multiplied as f32 (exact widening) with f32 accumulation, and the result is
// rounded once to C.
// param-count: CBLAS's argument list, kept by design (docs/architecture.md)
template <typename T, typename C>
void gemm_mixed(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                const T* a, int64_t lda, const T* b, int64_t ldb, double beta, C* c, int64_t ldc);

// Optional accounting of GEMM time (for benchmarks: the share of step time in GEMMs): every
// product called outside a parallel_for body, and every region opened with ScopedGemmTimer (the
// expert GEMMs, whose per-block products run inside one). Wall time on the calling thread. Off
// by default; counters are atomic, so ranks running as threads may share them.
struct GemmCounters {
  double seconds = 0;
  int64_t calls = 0;
  double flops = 0;  // 2 m n k per call
};
class ScopedGemmTimer {
 public:
  explicit ScopedGemmTimer(double flops);
  ~ScopedGemmTimer();
  ScopedGemmTimer(const ScopedGemmTimer&) = delete;
  ScopedGemmTimer& operator=(const ScopedGemmTimer&) = delete;

 private:
  bool on_;
  double flops_;
  std::chrono::steady_clock::time_point start_;
};
void set_gemm_timing(bool enabled);
GemmCounters gemm_counters();
void reset_gemm_counters();

}  // namespace moe::kernels::ref
