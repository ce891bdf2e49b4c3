// The CUDA kernels of activation.cu: activations (elementwise, SwiGLU, the sigmoid row gate),
// biases (whole and per expert block) and dropout. Called by the public entry points (kernels/*.cc)
// after they have validated every view; each only enqueues on ctx.stream() and returns launch
// errors (kernels/cuda/README.md). Host-only: no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "base/rng.h"
#include "kernels/activation.h"
#include "kernels/expert_blocks.h"

namespace moe::kernels::cuda {

Status activation_forward(Context& ctx, Activation act, const TensorView& x, const TensorView& y);
Status activation_backward(Context& ctx, Activation act, const TensorView& x, const TensorView& dy,
                           const TensorView& dx);
Status swiglu_forward(Context& ctx, const TensorView& x, const TensorView& y);
Status swiglu_backward(Context& ctx, const TensorView& x, const TensorView& dy,
                       const TensorView& dx);
Status sigmoid_gate_forward(Context& ctx, const TensorView& x, const TensorView& logit,
                            const TensorView& y);
Status sigmoid_gate_backward(Context& ctx, const TensorView& x, const TensorView& logit,
                             const TensorView& dy, const TensorView& dx, const TensorView& dlogit);
Status add_bias(Context& ctx, const TensorView& x, const TensorView& bias);
Status bias_grad(Context& ctx, const TensorView& dy, const TensorView& dbias);
Status add_bias_blocks(Context& ctx, const TensorView& x, const TensorView& bias,
                       const ExpertBlocks& blocks);
Status bias_grad_blocks(Context& ctx, const TensorView& dy, const TensorView& dbias,
                        const ExpertBlocks& blocks);
// backward = false: y = mask(x) / (1 - p); backward = true: the same mask applied to dy.
Status dropout(Context& ctx, const TensorView& x, const TensorView& row_keys, int64_t key_base,
               CounterRng rng, float p, const TensorView& y);

}  // namespace moe::kernels::cuda
