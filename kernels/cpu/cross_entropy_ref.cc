#include "kernels/cpu/cross_entropy_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/cpu/vector_math.h"

namespace moe::kernels::ref {
namespace {

// logsumexp of a row, stabilised by the row maximum; partial sums in T per lane, then double.
template <typename T>
double row_lse(const T* row, int64_t v) {
  constexpr int kLanes = 8;
  T lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, -std::numeric_limits<T>::infinity());
  int64_t k = 0;
  for (; k + kLanes <= v; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane_max[l] = std::max(lane_max[l], row[k + l]);
  }
  T mx = *std::max_element(lane_max, lane_max + kLanes);
  for (; k < v; ++k) mx = std::max(mx, row[k]);
  T part[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= v; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) part[l] += vector_exp(row[j + l] - mx);
  }
  double s = 0;
  for (; j < v; ++j) s += vector_exp(row[j] - mx);
  for (int l = 0; l < kLanes; ++l) s += part[l];
  return static_cast<double>(mx) + std::log(s);
}

// The f32 rows, the bulk of a training step's cross-entropy, are also compiled for AVX2 and
// picked at load time (GCC function multiversioning): twice the lanes of the baseline SSE2 for
// the exp loops. AVX2 without FMA: the same operations in the same order, so both versions give
// the same bits.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MOE_AVX2_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MOE_AVX2_CLONES
#endif

MOE_AVX2_CLONES double row_lse_f32(const float* row, int64_t v) { return row_lse<float>(row, v); }

// d[j] = s * exp(row[j] - l) - (j == t ? s : 0); d may alias row.
MOE_AVX2_CLONES void softmax_grad_row_f32(const float* row, float l, float s, int64_t t, int64_t v,
                                          float* d) {
  for (int64_t j = 0; j < v; ++j) d[j] = s * vector_exp(row[j] - l);
  d[t] -= s;
}

template <typename T>
double lse_of_row(const T* row, int64_t v) {
  if constexpr (std::is_same_v<T, float>) {
    return row_lse_f32(row, v);
  } else {
    return row_lse<T>(row, v);
  }
}

}  // namespace

template <typename T>
double cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t v, T* lse,
                             T* row_loss, int64_t* count) {
  // Rows in parallel; the total is added in row order afterwards.
  std::vector<double> losses(static_cast<size_t>(n));
  parallel_for(n, row_grain(2 * v), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      double l = 0, loss = 0;
      if (targets[i] >= 0) {
        const T* row = logits + i * v;
        l = lse_of_row(row, v);
        loss = l - static_cast<double>(row[targets[i]]);
      }
      losses[i] = loss;
      if (lse != nullptr) lse[i] = static_cast<T>(l);
      if (row_loss != nullptr) row_loss[i] = static_cast<T>(loss);
    }
  });
  double total = 0;
  *count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] >= 0) {
      total += losses[i];
      ++*count;
    }
  }
  return total;
}

template <typename T, typename D>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, int64_t n,
                            int64_t v, double scale, D* d_logits) {
  const T s = static_cast<T>(scale);
  parallel_for(n, row_grain(v), [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const T* row = logits + i * v;
      D* d = d_logits + i * v;
      if (targets[i] < 0) {
        std::fill(d, d + v, D(0));
        continue;
      }
      const T l = lse[i];
      if constexpr (std::is_same_v<T, float> && std::is_same_v<D, float>) {
        softmax_grad_row_f32(row, l, s, targets[i], v, d);
      } else if constexpr (std::is_same_v<T, D>) {
        // Element j is read before d[j] is written, so d may alias row.
        for (int64_t j = 0; j < v; ++j) d[j] = s * vector_exp(row[j] - l);
        d[targets[i]] -= s;
      } else {
        const int64_t t = targets[i];
        for (int64_t j = 0; j < v; ++j)
          d[j] = static_cast<D>(s * vector_exp(row[j] - l) - (j == t ? s : T(0)));
      }
    }
  });
}

#define MOE_INSTANTIATE_CROSS_ENTROPY(T)                                                           \
  template double cross_entropy_forward<T>(const T*, const int32_t*, int64_t, int64_t, T*, T*,     \
                                           int64_t*);                                              \
  template void cross_entropy_backward<T, T>(const T*, const int32_t*, const T*, int64_t, int64_t, \
                                             double, T*);
MOE_INSTANTIATE_CROSS_ENTROPY(float)
MOE_INSTANTIATE_CROSS_ENTROPY(double)
template void cross_entropy_backward<float, bf16>(const float*, const int32_t*, const float*,
                                                  int64_t, int64_t, double, bf16*);
#undef MOE_INSTANTIATE_CROSS_ENTROPY

}  // namespace moe::kernels::ref
