// Token embedding lookup and its backward (a deterministic in-order scatter-add).
#pragma once

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

// out[n, :] = table[ids[n], :]. ids i32 [N] in [0, V); table [V, D]; out [N, D] (overwritten).
// An id outside [0, V) is kInvalidArgument naming its position.
Status embedding_forward(const TensorView& ids, const TensorView& table, const TensorView& out,
                         Stream stream = {});
// d_table[ids[n], :] += d_out[n, :] for n in order. Accumulates.
Status embedding_backward(const TensorView& ids, const TensorView& d_out,
                          const TensorView& d_table, Stream stream = {});

}  // namespace moe::kernels
