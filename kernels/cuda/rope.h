// The CUDA kernels of rope.cu: rotary position embeddings on packed qkv, forward and backward.
// Called by the public entry points (kernels/*.cc) after they have validated every view; each
// only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/rope.h"

namespace moe::kernels::cuda {

// rope_forward (transpose false) or rope_backward (true) of kernels/rope.h: in, out [B*S, 3D]
// (out may be in).
Status rope(Context& ctx, const RopeArgs& args, bool transpose, const TensorView& in,
            const TensorView& out);

}  // namespace moe::kernels::cuda
