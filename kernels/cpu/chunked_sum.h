// The fixed summation order of the long sums a GPU runs in parallel that the CPU must match bit
// for bit (the AC router's metric): runs of kSumChunk consecutive terms added left to right,
// then the runs' sums by the same rule, level after level, until at most one run is left, whose
// sum is the result. kernels/cuda/cuda_util.cuh's chunked_row_sums runs each level as one kernel
// with one thread per run: the same additions in the same order.
#pragma once

#include <cstdint>

#include "base/dtype.h"  // MOE_HOST_DEVICE

namespace moe::kernels::ref {

constexpr int64_t kSumChunk = 64;

// x[0] + x[1] + ... + x[n - 1], left to right (0 for n = 0).
MOE_HOST_DEVICE inline double run_sum(const double* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

// The runs of one level over n terms.
MOE_HOST_DEVICE inline int64_t sum_runs(int64_t n) { return (n + kSumChunk - 1) / kSumChunk; }

// The chunked sum of x[0, n); `scratch` holds sum_runs(n) doubles (unused when n <= kSumChunk).
inline double chunked_sum(const double* x, int64_t n, double* scratch) {
  if (n <= kSumChunk) return run_sum(x, n);
  const double* level = x;
  while (n > kSumChunk) {
    const int64_t runs = sum_runs(n);
    // In place from the second level on: run j is read before scratch[j] (j < j * kSumChunk for
    // j >= 1, and run 0 is summed before it is written) is overwritten.
    for (int64_t j = 0; j < runs; ++j) {
      const int64_t begin = j * kSumChunk;
      const int64_t len = n - begin < kSumChunk ? n - begin : kSumChunk;
      scratch[j] = run_sum(level + begin, len);
    }
    level = scratch;
    n = runs;
  }
  return run_sum(level, n);
}

}  // namespace moe::kernels::ref
