// Optimiser updates on parameter views (fp32 master weights and state on the GPU, the working
// dtype on the CPU), the global gradient norm, and elementwise helpers.
#pragma once

#include <vector>

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

struct AdamWArgs {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0;  // decoupled: p *= 1 - lr * wd, before the Adam step (PyTorch AdamW)
  int64_t step = 1;         // 1-based, for bias correction
};
// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr * (m / (1 - b1^t)) /
// (sqrt(v / (1 - b2^t)) + eps). param, grad, m, v: one shape and float dtype; m, v updated.
Status adamw_step(const AdamWArgs& args, const TensorView& param, const TensorView& grad,
                  const TensorView& m, const TensorView& v, Stream stream = {});

struct SgdArgs {
  double lr = 1e-2, momentum = 0, weight_decay = 0;
  bool first_step = true;  // the momentum buffer starts as the gradient (PyTorch)
};
// g' = g + wd p; buf = first ? g' : momentum buf + g' (when momentum > 0); p -= lr * buf (or g').
// `buf` may be empty when momentum == 0.
Status sgd_step(const SgdArgs& args, const TensorView& param, const TensorView& grad,
                const TensorView& buf, Stream stream = {});

// sum of squares of every element of every view, accumulated in double.
StatusOr<double> sum_of_squares(const std::vector<TensorView>& views);
// x *= alpha, in place.
Status scale_inplace(const TensorView& x, double alpha, Stream stream = {});
// y += alpha * x.
Status axpy(double alpha, const TensorView& x, const TensorView& y, Stream stream = {});
// out = a + b (out may alias a or b).
Status add(const TensorView& a, const TensorView& b, const TensorView& out, Stream stream = {});
// True when every element is finite.
StatusOr<bool> all_finite(const TensorView& x);

}  // namespace moe::kernels
