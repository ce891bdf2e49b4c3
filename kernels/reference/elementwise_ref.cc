#include "kernels/reference/elementwise_ref.h"

#include <cmath>

namespace moe::kernels::ref {

template <typename T>
void add(const T* a, const T* b, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void axpy(double alpha, const T* x, int64_t n, T* y) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<T>(static_cast<double>(y[i]) + alpha * static_cast<double>(x[i]));
  }
}

template <typename T>
void scale(double alpha, int64_t n, T* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(alpha * static_cast<double>(x[i]));
}

template <typename T>
bool all_finite(const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return false;
  }
  return true;
}

#define MOE_INSTANTIATE_ELEMENTWISE(T)                   \
  template void add<T>(const T*, const T*, int64_t, T*); \
  template void axpy<T>(double, const T*, int64_t, T*);  \
  template void scale<T>(double, int64_t, T*);           \
  template bool all_finite<T>(const T*, int64_t);
MOE_INSTANTIATE_ELEMENTWISE(float)
MOE_INSTANTIATE_ELEMENTWISE(double)
#undef MOE_INSTANTIATE_ELEMENTWISE

}  // namespace moe::kernels::ref
