// Plain C++ activations (double accumulation where it matters). CPU backend and test oracle.
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

template <typename T> T relu(T x);
template <typename T> T relu_grad(T x);
template <typename T> T gelu_erf(T x);
template <typename T> T gelu_erf_grad(T x);
template <typename T> T gelu_tanh(T x);
template <typename T> T gelu_tanh_grad(T x);

}  // namespace moe::kernels::ref
