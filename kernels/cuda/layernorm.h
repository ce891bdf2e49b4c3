// The CUDA kernels of layernorm.cu: LayerNorm and RMSNorm forward and backward.
// Called by the public entry points (kernels/*.cc) after they have validated every view; each
// only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/layernorm.h"

namespace moe::kernels::cuda {

Status layernorm_forward(Context& ctx, const TensorView& x, const TensorView& gamma,
                         const TensorView& beta, double eps, const TensorView& y,
                         const TensorView& mean, const TensorView& rstd);
Status layernorm_backward(Context& ctx, const TensorView& dy, const TensorView& x,
                          const TensorView& gamma, const TensorView& mean, const TensorView& rstd,
                          const LayerNormGrads& grads);
Status rmsnorm_forward(Context& ctx, const TensorView& x, const TensorView& gamma, double eps,
                       const TensorView& y, const TensorView& rstd);
Status rmsnorm_backward(Context& ctx, const TensorView& dy, const TensorView& x,
                        const TensorView& gamma, const TensorView& rstd, const RmsNormGrads& grads);

}  // namespace moe::kernels::cuda
