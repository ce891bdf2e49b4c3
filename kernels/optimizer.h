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

// A gradient arena sharded over ranks (the distributed optimizer) has its norm from the shards:
// on the CPU, sum_of_squares of a view sums blocks of kSquaresBlock elements from the view's
// start and adds the blocks' sums in block order, so the blocks of consecutive shards (each but
// the last a whole number of blocks) gathered in order give the same bits as the whole view.
// A GPU's sum_of_squares is grid-strided over the whole view and cannot be cut: there the two
// block kernels below return kUnimplemented, and sum_of_squares_by_blocks says so.
constexpr int64_t kSquaresBlock = int64_t{1} << 16;
bool sum_of_squares_by_blocks(const Context& ctx);
// out[b] = the sum of squares of x's block b (elements [b, b + 1) * kSquaresBlock), as
// sum_of_squares sums it. x: float [n] of any dtype; out: f64 [ceil(n / kSquaresBlock)],
// overwritten. CPU only.
Status sum_of_squares_blocks(Context& ctx, const TensorView& x, const TensorView& out);
// out[0] += (((0 + x[0]) + x[1]) + ...) + x[n - 1], in index order: the blocks' sums as
// sum_of_squares adds them. x: f64 [n]; out: f64 [1]. CPU only.
Status sum_in_order(Context& ctx, const TensorView& x, const TensorView& out);

}  // namespace moe::kernels
