#include "kernels/reference/cross_entropy_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/base/dtype.h"

namespace moe::kernels::ref {
namespace {

// exp for the vocabulary-wide loops (every token's softmax touches all V logits): Cephes' expf
// (range reduction by ln 2 in two parts, degree-6 polynomial, exponent by bit shift), within
// 2 ulp of std::exp on [-87, 88] and written without calls so that the loop vectorises. The
// arguments here are logit - max <= 0; inputs below -87 flush to 0.
inline float vector_exp(float x) {
  x = std::max(x, -87.0f);
  x = std::min(x, 88.0f);
  // Round to nearest by adding and subtracting 1.5 * 2^23 (no call, unlike std::floor on SSE2).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x <= -87.0f ? 0.0f : e * scale;
}
inline double vector_exp(double x) { return std::exp(x); }

// logsumexp of a row, stabilised by the row maximum; partial sums in T per lane, then double.
template <typename T>
double row_lse(const T* row, int64_t v) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < v; ++j) mx = std::max(mx, row[j]);
  constexpr int kLanes = 8;
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

}  // namespace

template <typename T>
double cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t v, T* lse,
                             T* row_loss, int64_t* count) {
  double total = 0;
  *count = 0;
  for (int64_t i = 0; i < n; ++i) {
    double l = 0, loss = 0;
    if (targets[i] >= 0) {
      const T* row = logits + i * v;
      l = row_lse(row, v);
      loss = l - static_cast<double>(row[targets[i]]);
      total += loss;
      ++*count;
    }
    if (lse != nullptr) lse[i] = static_cast<T>(l);
    if (row_loss != nullptr) row_loss[i] = static_cast<T>(loss);
  }
  return total;
}

template <typename T, typename D>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, int64_t n,
                            int64_t v, double scale, D* d_logits) {
  const T s = static_cast<T>(scale);
  for (int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * v;
    D* d = d_logits + i * v;
    if (targets[i] < 0) {
      std::fill(d, d + v, D(0));
      continue;
    }
    const T l = lse[i];
    if constexpr (std::is_same_v<T, D>) {
      // Element j is read before d[j] is written, so d may alias row.
      for (int64_t j = 0; j < v; ++j) d[j] = s * vector_exp(row[j] - l);
      d[targets[i]] -= s;
    } else {
      const int64_t t = targets[i];
      for (int64_t j = 0; j < v; ++j) d[j] = static_cast<D>(s * vector_exp(row[j] - l) - (j == t ? s : T(0)));
    }
  }
}

#define MOE_INSTANTIATE_CROSS_ENTROPY(T)                                                        \
  template double cross_entropy_forward<T>(const T*, const int32_t*, int64_t, int64_t, T*, T*,  \
                                           int64_t*);                                           \
  template void cross_entropy_backward<T, T>(const T*, const int32_t*, const T*, int64_t,        \
                                             int64_t, double, T*);
MOE_INSTANTIATE_CROSS_ENTROPY(float)
MOE_INSTANTIATE_CROSS_ENTROPY(double)
template void cross_entropy_backward<float, bf16>(const float*, const int32_t*, const float*,
                                                  int64_t, int64_t, double, bf16*);
#undef MOE_INSTANTIATE_CROSS_ENTROPY

}  // namespace moe::kernels::ref
