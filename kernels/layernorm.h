// Normalisation over the last dimension, statistics accumulated in double:
//   LayerNorm: y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps) (biased variance,
//              as PyTorch);
//   RMSNorm:   y = x * rstd * gamma, rstd = 1 / sqrt(mean_j x^2 + eps) (as transformers'
//              LlamaRMSNorm / MixtralRMSNorm / Qwen2RMSNorm; no centring, no beta).
// x, y, dy, dx are act (f32, f64, bf16); gamma, beta, mean, rstd and the parameter gradients are
// F = compute_dtype(act).
#pragma once

#include "base/context.h"
#include "base/tensor.h"

namespace moe::kernels {

// [in] x [N, D]; [in] gamma, beta [D]; eps >= 0.
// [out] y [N, D] (may alias x), mean and rstd [N] (saved for backward): all overwritten.
Status layernorm_forward(Context& ctx, const TensorView& x, const TensorView& gamma,
                         const TensorView& beta, double eps, const TensorView& y,
                         const TensorView& mean, const TensorView& rstd);
// What layernorm_backward writes: dx [N, D], overwritten (may alias dy); dgamma, dbeta [D],
// ACCUMULATED.
struct LayerNormGrads {
  TensorView dx, dgamma, dbeta;
};
// [in] dy [N, D]; the saved x [N, D], mean and rstd [N]; gamma [D].
Status layernorm_backward(Context& ctx, const TensorView& dy, const TensorView& x,
                          const TensorView& gamma, const TensorView& mean, const TensorView& rstd,
                          const LayerNormGrads& grads);

// [in] x [N, D]; [in] gamma [D]; eps >= 0.
// [out] y [N, D] (may alias x), rstd [N] (saved for backward): both overwritten.
Status rmsnorm_forward(Context& ctx, const TensorView& x, const TensorView& gamma, double eps,
                       const TensorView& y, const TensorView& rstd);
// What rmsnorm_backward writes: dx [N, D], overwritten (may alias dy); dgamma [D], ACCUMULATED.
struct RmsNormGrads {
  TensorView dx, dgamma;
};
// [in] dy [N, D]; the saved x [N, D] and rstd [N]; gamma [D].
Status rmsnorm_backward(Context& ctx, const TensorView& dy, const TensorView& x,
                        const TensorView& gamma, const TensorView& rstd, const RmsNormGrads& grads);

}  // namespace moe::kernels
