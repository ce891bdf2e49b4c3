// The CUDA kernels of optimizer.cu: the AdamW and SGD updates and the gradient norm's sum of
// squares. Called by the public entry points (kernels/*.cc) after they have validated every view;
// each only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include <vector>

#include "base/context.h"
#include "kernels/optimizer.h"

namespace moe::kernels::cuda {

Status adamw_step(Context& ctx, const AdamWArgs& args, const TensorView& param,
                  const TensorView& grad, const TensorView& m, const TensorView& v);
Status sgd_step(Context& ctx, const SgdArgs& args, const TensorView& param, const TensorView& grad,
                const TensorView& buf);
Status sum_of_squares(Context& ctx, const std::vector<TensorView>& views, const TensorView& out);

}  // namespace moe::kernels::cuda
