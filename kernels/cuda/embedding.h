// The CUDA kernels of embedding.cu: token and position embeddings, forward and backward. Called by
// the public entry points (kernels/*.cc) after they have validated every view; each only enqueues
// on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only: no CUDA types, so
// the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/embedding.h"

namespace moe::kernels::cuda {

// Ids outside [0, V) cannot be reported without a sync: their output rows are zero and they add no
// gradient (the data loader validates ids when it builds a batch).
Status embedding_forward(Context& ctx, const TensorView& ids, const TensorView& table,
                         const TensorView& positions, int64_t seq_len, const TensorView& out);
Status embedding_backward(Context& ctx, const TensorView& ids, const TensorView& d_out,
                          const TensorView& d_table, const TensorView& d_positions,
                          int64_t seq_len);

}  // namespace moe::kernels::cuda
