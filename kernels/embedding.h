// Token embedding lookup and its backward (a deterministic in-order scatter-add).
#pragma once

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

// out[n, :] = table[ids[n], :].
//   [in] ids i32 [N], each in [0, V); [in] table [V, D] (f32|f64); [out] out [N, D], overwritten.
// An id outside [0, V) is kInvalidArgument naming the id and its position; out is then untouched.
Status embedding_forward(const TensorView& ids, const TensorView& table, const TensorView& out,
                         Stream stream = {});
// d_table[ids[n], :] += d_out[n, :] for n = 0, 1, ... in order (deterministic).
//   [in] ids i32 [N]; [in] d_out [N, D]; [in,out] d_table [V, D], ACCUMULATED.
Status embedding_backward(const TensorView& ids, const TensorView& d_out, const TensorView& d_table,
                          Stream stream = {});

}  // namespace moe::kernels
