// Plain C++ activations and SwiGLU's per-pair formula, computed in double and rounded once to T.
// Shared by the CPU backend (and test oracle) and the CUDA kernels (MOE_HOST_DEVICE), so both
// evaluate the same expressions.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/dtype.h"  // MOE_HOST_DEVICE
#include "kernels/activation.h"

namespace moe::kernels::ref {

inline constexpr double kInvSqrt2 = 0.70710678118654752440;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluCubic = 0.044715;

template <typename T>
MOE_HOST_DEVICE inline T relu(T x) {
  return x > T(0) ? x : T(0);
}
template <typename T>
MOE_HOST_DEVICE inline T relu_grad(T x) {
  return x > T(0) ? T(1) : T(0);
}
// x Phi(x), the exact (erf) form.
template <typename T>
MOE_HOST_DEVICE inline T gelu_erf(T x) {
  const double xd = x;
  return static_cast<T>(0.5 * xd * (1.0 + erf(xd * kInvSqrt2)));
}
template <typename T>
MOE_HOST_DEVICE inline T gelu_erf_grad(T x) {
  const double xd = x;
  const double cdf = 0.5 * (1.0 + erf(xd * kInvSqrt2));
  const double pdf = kInvSqrt2Pi * exp(-0.5 * xd * xd);
  return static_cast<T>(cdf + xd * pdf);
}
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's approximation.
template <typename T>
MOE_HOST_DEVICE inline T gelu_tanh(T x) {
  const double xd = x;
  const double inner = kSqrt2OverPi * (xd + kGeluCubic * xd * xd * xd);
  return static_cast<T>(0.5 * xd * (1.0 + tanh(inner)));
}
template <typename T>
MOE_HOST_DEVICE inline T gelu_tanh_grad(T x) {
  const double xd = x;
  const double inner = kSqrt2OverPi * (xd + kGeluCubic * xd * xd * xd);
  const double th = tanh(inner);
  const double dinner = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * xd * xd);
  return static_cast<T>(0.5 * (1.0 + th) + 0.5 * xd * (1.0 - th * th) * dinner);
}

// The logistic sigmoid 1 / (1 + e^-x), with e^-|x| in (0, 1] the only exponential: no overflow
// for any x (far out it rounds to 0 or 1).
MOE_HOST_DEVICE inline double logistic(double x) {
  const double e = exp(-fabs(x));
  return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
// x sigmoid(x), and its derivative sigmoid(x) (1 + x (1 - sigmoid(x))).
template <typename T>
MOE_HOST_DEVICE inline T silu(T x) {
  const double xd = x;
  return static_cast<T>(xd * logistic(xd));
}
template <typename T>
MOE_HOST_DEVICE inline T silu_grad(T x) {
  const double xd = x;
  const double s = logistic(xd);
  return static_cast<T>(s * (1.0 + xd * (1.0 - s)));
}

// SwiGLU of one (gate, up) pair in double: silu(gate) * up.
MOE_HOST_DEVICE inline double swiglu(double gate, double up) { return silu(gate) * up; }
// Its gradient given dy: *d_gate = dy * up * silu'(gate), *d_up = dy * silu(gate).
MOE_HOST_DEVICE inline void swiglu_grad(double gate, double up, double dy, double* d_gate,
                                        double* d_up) {
  *d_gate = dy * up * silu_grad(gate);
  *d_up = dy * silu(gate);
}

template <typename T>
MOE_HOST_DEVICE inline T apply_activation(Activation act, T x) {
  switch (act) {
    case Activation::kRelu:
      return relu(x);
    case Activation::kGelu:
      return gelu_erf(x);
    case Activation::kGeluTanh:
      return gelu_tanh(x);
    case Activation::kSilu:
      return silu(x);
  }
  return x;
}

template <typename T>
MOE_HOST_DEVICE inline T apply_activation_grad(Activation act, T x) {
  switch (act) {
    case Activation::kRelu:
      return relu_grad(x);
    case Activation::kGelu:
      return gelu_erf_grad(x);
    case Activation::kGeluTanh:
      return gelu_tanh_grad(x);
    case Activation::kSilu:
      return silu_grad(x);
  }
  return T(1);
}

}  // namespace moe::kernels::ref
