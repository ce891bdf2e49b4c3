// Layer normalisation over the last dimension: y = (x - mean) * rstd * gamma + beta,
// rstd = 1 / sqrt(var + eps) (biased variance, as PyTorch). Host f32/f64; statistics in double.
#pragma once

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

// [in] x [N, D]; [in] gamma, beta [D]; eps >= 0.
// [out] y [N, D] (may alias x), mean and rstd [N] (saved for backward): all overwritten.
// Every tensor has x's float dtype.
Status layernorm_forward(const TensorView& x, const TensorView& gamma, const TensorView& beta,
                         double eps, const TensorView& y, const TensorView& mean,
                         const TensorView& rstd, Stream stream = {});
// [in] dy [N, D]; the saved x [N, D], mean and rstd [N]; gamma [D].
// [out] dx [N, D], overwritten (may alias dy). [in,out] dgamma, dbeta [D], ACCUMULATED.
Status layernorm_backward(const TensorView& dy, const TensorView& x, const TensorView& gamma,
                          const TensorView& mean, const TensorView& rstd, const TensorView& dx,
                          const TensorView& dgamma, const TensorView& dbeta, Stream stream = {});

}  // namespace moe::kernels
