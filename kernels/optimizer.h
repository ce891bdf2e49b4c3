// Optimiser updates on parameter views (the working dtype on the CPU, f32 or f64, for parameter,
// gradient and state alike), and the global gradient norm used for clipping. Clipping itself is
// scale_inplace (kernels/elementwise.h, included here for the optimiser's callers).
#pragma once

#include <vector>

#include "core/base/device.h"
#include "core/base/tensor.h"
#include "kernels/elementwise.h"

namespace moe::kernels {

struct AdamWArgs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0;  // decoupled: p *= 1 - lr * wd, before the Adam step (PyTorch AdamW)
  int64_t step = 1;         // 1-based, for bias correction
};
// One AdamW step, elementwise, in double:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p = p (1 - lr wd) - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
// [in,out] param, m, v (updated in place); [in] grad. One shape and float dtype.
Status adamw_step(const AdamWArgs& args, const TensorView& param, const TensorView& grad,
                  const TensorView& m, const TensorView& v, Stream stream = {});

struct SgdArgs {
  double lr = 1e-2, momentum = 0, weight_decay = 0;
  bool first_step = true;  // the momentum buffer starts as the gradient (PyTorch)
};
// One SGD step (PyTorch's, without dampening or Nesterov):
//   g' = g + wd p;  buf = first_step ? g' : momentum buf + g' (only when momentum > 0);
//   p -= lr * (momentum > 0 ? buf : g').
// [in,out] param; [in] grad; [in,out] buf (may be an empty view when momentum == 0).
Status sgd_step(const SgdArgs& args, const TensorView& param, const TensorView& grad,
                const TensorView& buf, Stream stream = {});

// Sum of squares of every element of every view (float views of any mix of f32/f64),
// accumulated in double in view order.
StatusOr<double> sum_of_squares(const std::vector<TensorView>& views);
// sqrt(sum_of_squares(views)): the global L2 norm of a list of gradients.
StatusOr<double> global_l2_norm(const std::vector<TensorView>& views);

}  // namespace moe::kernels
