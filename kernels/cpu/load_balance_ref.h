// Plain C++ loop of loss-free balancing's bias update (the CPU backend; kernels/load_balance.h):
// also what the CUDA kernel computes, as a device function, so both round the same way.
#pragma once

#include <cstdint>

#include "base/dtype.h"  // MOE_HOST_DEVICE

namespace moe::kernels::ref {

// bias[e] += rate * sign(mean - load[e]) for e < n, mean = (sum of load in index order) / n.
template <typename T>
MOE_HOST_DEVICE inline void score_bias_update(const double* load, int64_t n, double rate, T* bias) {
  double sum = 0;
  for (int64_t e = 0; e < n; ++e) sum += load[e];
  const double mean = sum / static_cast<double>(n);
  for (int64_t e = 0; e < n; ++e) {
    const double sign = load[e] < mean ? 1.0 : load[e] > mean ? -1.0 : 0.0;
    bias[e] = static_cast<T>(static_cast<double>(bias[e]) + rate * sign);
  }
}

}  // namespace moe::kernels::ref
