// Plain C++ layer normalisation over the last dimension (the CPU backend). Statistics and the
// backward's row reductions are accumulated in double. See kernels/layernorm.h for the contract.
// T = float, double or bf16 (x, y, dy, dx); F = float or double (gamma, beta, mean, rstd, grads).
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

// x, y [N, D] (y may alias x); gamma, beta [D]; mean, rstd [N]. Overwrites y, mean, rstd.
template <typename T, typename F>
void layernorm_forward(const T* x, const F* gamma, const F* beta, int64_t n, int64_t d, double eps,
                       T* y, F* mean, F* rstd);

// dy, x, dx [N, D] (dx may alias dy); gamma, dgamma, dbeta [D]; mean, rstd [N].
// Overwrites dx; accumulates dgamma and dbeta (summed over rows in double, then added once).
template <typename T, typename F>
void layernorm_backward(const T* dy, const T* x, const F* gamma, const F* mean, const F* rstd,
                        int64_t n, int64_t d, T* dx, F* dgamma, F* dbeta);

}  // namespace moe::kernels::ref
