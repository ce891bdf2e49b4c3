#include "kernels/reference/activation_ref.h"

#include <cmath>

namespace moe::kernels::ref {
namespace {
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;
}  // namespace

template <typename T> T relu(T x) { return x > T(0) ? x : T(0); }
template <typename T> T relu_grad(T x) { return x > T(0) ? T(1) : T(0); }

template <typename T> T gelu_erf(T x) {
  const double xd = x;
  return static_cast<T>(0.5 * xd * (1.0 + std::erf(xd * kInvSqrt2)));
}
template <typename T> T gelu_erf_grad(T x) {
  const double xd = x;
  const double cdf = 0.5 * (1.0 + std::erf(xd * kInvSqrt2));
  const double pdf = kInvSqrt2Pi * std::exp(-0.5 * xd * xd);
  return static_cast<T>(cdf + xd * pdf);
}

template <typename T> T gelu_tanh(T x) {
  const double xd = x;
  const double inner = kSqrt2OverPi * (xd + kGeluCubic * xd * xd * xd);
  return static_cast<T>(0.5 * xd * (1.0 + std::tanh(inner)));
}
template <typename T> T gelu_tanh_grad(T x) {
  const double xd = x;
  const double inner = kSqrt2OverPi * (xd + kGeluCubic * xd * xd * xd);
  const double th = std::tanh(inner);
  const double dinner = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * xd * xd);
  return static_cast<T>(0.5 * (1.0 + th) + 0.5 * xd * (1.0 - th * th) * dinner);
}

#define MOE_INSTANTIATE_ACT(T)                          \
  template T relu<T>(T);                                \
  template T relu_grad<T>(T);                           \
  template T gelu_erf<T>(T);                            \
  template T gelu_erf_grad<T>(T);                       \
  template T gelu_tanh<T>(T);                           \
  template T gelu_tanh_grad<T>(T);
MOE_INSTANTIATE_ACT(float)
MOE_INSTANTIATE_ACT(double)
#undef MOE_INSTANTIATE_ACT

}  // namespace moe::kernels::ref
