#include "kernels/cpu/moe_stats_ref.h"

#include <algorithm>
#include <cmath>

#include "base/dtype.h"

namespace moe::kernels::ref {

template <typename T>
void entropy_sum(const T* p, int64_t n, double* out) {
  double h = 0;
  for (int64_t i = 0; i < n; ++i)
    if (p[i] > T(0)) h -= static_cast<double>(p[i]) * std::log(static_cast<double>(p[i]));
  out[0] += h;
}

template <typename T>
void row_norm_sum(const T* p, int64_t rows, int64_t d, double* out) {
  double total = 0;
  for (int64_t t = 0; t < rows; ++t) {
    double sq = 0;
    for (int64_t q = 0; q < d; ++q) {
      const double v = static_cast<double>(p[t * d + q]);
      sq += v * v;
    }
    total += std::sqrt(sq);
  }
  out[0] += total;
}

template <typename T>
void column_sum(const T* p, int64_t rows, int64_t cols, int64_t col, double* out) {
  double s = 0;
  for (int64_t t = 0; t < rows; ++t) s += static_cast<double>(p[t * cols + col]);
  out[0] += s;
}

void accumulate_counts(const int64_t* c, int64_t n, double* o) {
  for (int64_t i = 0; i < n; ++i) o[i] += static_cast<double>(c[i]);
}

void count_mismatches(const int32_t* pa, const int32_t* pb, int64_t size, double* out) {
  int64_t n = 0;
  for (int64_t i = 0; i < size; ++i) n += pa[i] != pb[i];
  out[0] += static_cast<double>(n);
}

template <typename T>
void sparsemixer_stats(const uint8_t* m, const uint8_t* am, const T* c, int64_t tokens,
                       int64_t experts, double* o) {
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t unmasked = 0;
    for (int64_t e = 0; e < experts; ++e) unmasked += m[t * experts + e];
    o[0] += static_cast<double>(unmasked);
    o[1] += unmasked == 1;
    o[2] += am[t] == 0;
    o[3] += c[t] != T(1);
  }
}

void ac_stats(const double* dev, const int64_t* n, const int64_t* local, const double* sum,
              int64_t experts, int64_t d, double* o) {
  for (int64_t k = 0; k < experts; ++k) {
    o[k] += static_cast<double>(local[k]);
    if (n[k] == 0) continue;
    double mean_mad = 0;
    for (int64_t q = 0; q < d; ++q) mean_mad += dev[k * d + q] / static_cast<double>(n[k]);
    mean_mad /= static_cast<double>(d);
    o[experts + k] += mean_mad * static_cast<double>(local[k]);
  }
  double* fixed = o + 2 * experts;
  const bool first = fixed[4] == 0;
  fixed[0] += sum[0];
  fixed[1] = first ? sum[2] : std::min(fixed[1], sum[2]);
  fixed[2] = first ? sum[3] : std::max(fixed[2], sum[3]);
  fixed[3] = sum[4];
  fixed[4] += 1;
}

// entropy_sum, column_sum and sparsemixer_stats: full-precision views (dispatch_full);
// row_norm_sum: any float view (dispatch_float).
#define MOE_INSTANTIATE_MOE_STATS_FULL(T)                                                        \
  template void entropy_sum<T>(const T*, int64_t, double*);                                      \
  template void column_sum<T>(const T*, int64_t, int64_t, int64_t, double*);                     \
  template void sparsemixer_stats<T>(const uint8_t*, const uint8_t*, const T*, int64_t, int64_t, \
                                     double*);
MOE_INSTANTIATE_MOE_STATS_FULL(float)
MOE_INSTANTIATE_MOE_STATS_FULL(double)
#undef MOE_INSTANTIATE_MOE_STATS_FULL
template void row_norm_sum<float>(const float*, int64_t, int64_t, double*);
template void row_norm_sum<double>(const double*, int64_t, int64_t, double*);
template void row_norm_sum<bf16>(const bf16*, int64_t, int64_t, double*);

}  // namespace moe::kernels::ref
