// The CUDA kernel of load_balance.cu: loss-free balancing's bias update.
// Called by the public entry point (kernels/load_balance.cc) after it has validated every view;
// it only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "base/tensor.h"

namespace moe::kernels::cuda {

Status score_bias_update(Context& ctx, const TensorView& load, double rate, const TensorView& bias);

}  // namespace moe::kernels::cuda
