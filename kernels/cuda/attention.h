// The CUDA kernels of attention.cu: causal multi-head attention, forward and backward.
// Called by the public entry points (kernels/*.cc) after they have validated every view; each
// only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/attention.h"

namespace moe::kernels::cuda {

Status attention_forward(Context& ctx, const AttentionArgs& args, const TensorView& qkv,
                         const TensorView& out, const TensorView& lse);
Status attention_backward(Context& ctx, const AttentionArgs& args, const TensorView& d_out,
                          const TensorView& qkv, const TensorView& out, const TensorView& lse,
                          const TensorView& d_qkv);

}  // namespace moe::kernels::cuda
