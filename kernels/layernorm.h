// Layer normalisation over the last dimension: y = (x - mean) * rstd * gamma + beta,
// rstd = 1 / sqrt(var + eps) (biased variance, as PyTorch).
#pragma once

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

// x, y [N, D]; gamma, beta [D]; mean, rstd [N] (saved for backward). Overwrites y, mean, rstd.
// y may alias x.
Status layernorm_forward(const TensorView& x, const TensorView& gamma, const TensorView& beta,
                         double eps, const TensorView& y, const TensorView& mean,
                         const TensorView& rstd, Stream stream = {});
// dx (overwritten; may alias dy), dgamma and dbeta (accumulated) from dy and the saved x, mean,
// rstd.
Status layernorm_backward(const TensorView& dy, const TensorView& x, const TensorView& gamma,
                          const TensorView& mean, const TensorView& rstd, const TensorView& dx,
                          const TensorView& dgamma, const TensorView& dbeta, Stream stream = {});

}  // namespace moe::kernels
