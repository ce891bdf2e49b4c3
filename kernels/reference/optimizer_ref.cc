#include "kernels/reference/optimizer_ref.h"

#include <cmath>

namespace moe::kernels::ref {

template <typename T>
void adamw_step(const AdamWArgs& a, int64_t n, T* param, const T* grad, T* m, T* v) {
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
  const double decay = 1.0 - a.lr * a.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const double g = grad[i];
    const double mi = a.beta1 * static_cast<double>(m[i]) + (1 - a.beta1) * g;
    const double vi = a.beta2 * static_cast<double>(v[i]) + (1 - a.beta2) * g * g;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    const double p = static_cast<double>(param[i]) * decay;
    param[i] = static_cast<T>(p - a.lr * (mi / bc1) / (std::sqrt(vi / bc2) + a.eps));
  }
}

template <typename T>
void sgd_step(const SgdArgs& a, int64_t n, T* param, const T* grad, T* buf) {
  const bool momentum = a.momentum > 0;
  for (int64_t i = 0; i < n; ++i) {
    double d = static_cast<double>(grad[i]) + a.weight_decay * static_cast<double>(param[i]);
    if (momentum) {
      d = a.first_step ? d : a.momentum * static_cast<double>(buf[i]) + d;
      buf[i] = static_cast<T>(d);
    }
    param[i] = static_cast<T>(static_cast<double>(param[i]) - a.lr * d);
  }
}

template <typename T>
void accumulate_sum_of_squares(const T* x, int64_t n, double* total) {
  double s = *total;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  *total = s;
}

#define MOE_INSTANTIATE_OPTIMIZER(T)                                            \
  template void adamw_step<T>(const AdamWArgs&, int64_t, T*, const T*, T*, T*); \
  template void sgd_step<T>(const SgdArgs&, int64_t, T*, const T*, T*);         \
  template void accumulate_sum_of_squares<T>(const T*, int64_t, double*);
MOE_INSTANTIATE_OPTIMIZER(float)
MOE_INSTANTIATE_OPTIMIZER(double)
#undef MOE_INSTANTIATE_OPTIMIZER

}  // namespace moe::kernels::ref
