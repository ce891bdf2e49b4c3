// The CUDA kernels of cross_entropy.cu: the cross-entropy loss, forward and backward.. A target
// outside [-1, V) is treated as ignored (-1), for the same reason. Called by the public entry
// points (kernels/*.cc) after they have validated every view; each only enqueues on ctx.stream()
// and returns launch errors (kernels/cuda/README.md). Host-only: no CUDA types, so the CPU build
// includes it too.
#pragma once

#include "base/context.h"
#include "kernels/cross_entropy.h"

namespace moe::kernels::cuda {

Status cross_entropy_forward(Context& ctx, const TensorView& logits, const TensorView& targets,
                             const TensorView& lse, const TensorView& sums,
                             const TensorView& row_loss);
Status cross_entropy_backward(Context& ctx, const TensorView& logits, const TensorView& targets,
                              const TensorView& lse, double scale, const TensorView& d_logits);

}  // namespace moe::kernels::cuda
