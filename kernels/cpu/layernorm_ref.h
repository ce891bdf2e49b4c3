// Plain C++ LayerNorm and RMSNorm over the last dimension (the CPU backend). Statistics and the
// backward's row reductions are accumulated in double. See kernels/layernorm.h for the contract.
// T = float, double or bf16 (x, y, dy, dx); F = float or double (gamma, beta, mean, rstd, grads).
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

// What layernorm_forward writes (all overwritten): y [N, D] (may alias x); mean, rstd [N].
template <typename T, typename F>
struct LayerNormForwardOut {
  T* y = nullptr;
  F* mean = nullptr;
  F* rstd = nullptr;
};

// x [N, D]; gamma, beta [D]; the outputs in out.
template <typename T, typename F>
void layernorm_forward(const T* x, const F* gamma, const F* beta, int64_t n, int64_t d, double eps,
                       const LayerNormForwardOut<T, F>& out);

// What layernorm_backward writes: dx [N, D] (overwritten; may alias dy); dgamma, dbeta [D]
// (accumulated: summed over rows in double, then added once).
template <typename T, typename F>
struct LayerNormBackwardOut {
  T* dx = nullptr;
  F* dgamma = nullptr;
  F* dbeta = nullptr;
};

// dy, x [N, D]; gamma [D]; mean, rstd [N]; the gradients in grads.
template <typename T, typename F>
void layernorm_backward(const T* dy, const T* x, const F* gamma, const F* mean, const F* rstd,
                        int64_t n, int64_t d, const LayerNormBackwardOut<T, F>& grads);

// What rmsnorm_forward writes (both overwritten): y [N, D] (may alias x); rstd [N].
template <typename T, typename F>
struct RmsNormForwardOut {
  T* y = nullptr;
  F* rstd = nullptr;
};

// x [N, D]; gamma [D]; the outputs in out.
template <typename T, typename F>
void rmsnorm_forward(const T* x, const F* gamma, int64_t n, int64_t d, double eps,
                     const RmsNormForwardOut<T, F>& out);

// What rmsnorm_backward writes: dx [N, D] (overwritten; may alias dy); dgamma [D] (accumulated:
// summed over rows in double, then added once).
template <typename T, typename F>
struct RmsNormBackwardOut {
  T* dx = nullptr;
  F* dgamma = nullptr;
};

// dy, x [N, D]; gamma [D]; rstd [N]; the gradients in grads.
template <typename T, typename F>
void rmsnorm_backward(const T* dy, const T* x, const F* gamma, const F* rstd, int64_t n, int64_t d,
                      const RmsNormBackwardOut<T, F>& grads);

}  // namespace moe::kernels::ref
