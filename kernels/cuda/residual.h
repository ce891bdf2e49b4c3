// The CUDA kernels of residual.cu: the residual dynamics (plain, momentum, Adam) and the robust
// shifted input. Called by the public entry points (kernels/*.cc) after they have validated every
// view; each only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md).
// Host-only: no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/residual.h"

namespace moe::kernels::cuda {

Status residual_forward(Context& ctx, const ResidualArgs& args, const TensorView& x,
                        const TensorView& u, const ResidualState& in, const TensorView& out,
                        const ResidualState& state_out);
Status residual_backward(Context& ctx, const ResidualArgs& args, const TensorView& d_out,
                         const ResidualState& d_state_out, const TensorView& u,
                         const ResidualState& state_out, const ResidualBackwardOut& grads);
Status residual_shift_input(Context& ctx, const TensorView& x, const TensorView& p, double a_shift,
                            const TensorView& y);

}  // namespace moe::kernels::cuda
