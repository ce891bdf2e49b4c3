// Optimiser updates on full-precision parameter views (fp32 master weights, or f64 in tests, for
// parameter, gradient and state alike), and the squared gradient norm that clipping reads.
// Clipping is folded into the update as `grad_scale` (g' = grad_scale * g), so it costs no pass
// of its own.
#pragma once

#include <vector>

#include "base/context.h"
#include "base/tensor.h"

namespace moe::kernels {

struct AdamWArgs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0;  // decoupled: p *= 1 - lr * wd, before the Adam step (PyTorch AdamW)
  int64_t step = 1;         // 1-based, for bias correction
  double grad_scale = 1;    // gradient multiplier (clipping), > 0
};
// One AdamW step, elementwise, with g = grad_scale * grad:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p = p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
// [in,out] param, m, v (updated in place); [in] grad. One shape and full-precision dtype.
Status adamw_step(Context& ctx, const AdamWArgs& args, const TensorView& param,
                  const TensorView& grad, const TensorView& m, const TensorView& v);

struct SgdArgs {
  double lr = 1e-2, momentum = 0, weight_decay = 0;
  bool first_step = true;  // the momentum buffer starts as the gradient (PyTorch)
  double grad_scale = 1;   // gradient multiplier (clipping), > 0
};
// One SGD step (PyTorch's, without dampening or Nesterov), with g = grad_scale * grad:
//   g' = g + wd p;  buf = first_step ? g' : momentum buf + g' (only when momentum > 0);
//   p -= lr * (momentum > 0 ? buf : g').
// [in,out] param; [in] grad; [in,out] buf (may be an empty view when momentum == 0).
Status sgd_step(Context& ctx, const SgdArgs& args, const TensorView& param, const TensorView& grad,
                const TensorView& buf);

// out[0] += the sum of squares of every element of every view (float views of any dtype),
// accumulated in double in view order. out: f64 [1].
Status sum_of_squares(Context& ctx, const std::vector<TensorView>& views, const TensorView& out);

}  // namespace moe::kernels
