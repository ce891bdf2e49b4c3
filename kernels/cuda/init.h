// The CUDA kernels of init.cu: parameter initialisation (counter-RNG normal, constant).
// Called by the public entry points (kernels/*.cc) after they have validated every view; each
// only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "base/rng.h"
#include "kernels/init.h"

namespace moe::kernels::cuda {

Status init_normal(Context& ctx, const TensorView& t, double stddev, CounterRng rng,
                   uint64_t first_index);
Status init_constant(Context& ctx, const TensorView& t, double value);

}  // namespace moe::kernels::cuda
