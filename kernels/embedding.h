// Token (and learned position) embedding lookup and its backward (deterministic in-order
// scatter-adds).
#pragma once

#include "base/context.h"
#include "base/tensor.h"

namespace moe::kernels {

// out[n, :] = table[ids[n], :] (+ positions[n % S, :] when positions is given).
//   [in] ids i32 [N] on the device, each in [0, V); [in] table [V, D] (any float dtype, e.g. the
//   bf16 working copy); [in] positions [S_max, D] F or empty, with 1 <= S <= S_max and N % S == 0;
//   [out] out [N, D] act, overwritten (the sum is rounded once).
// An id outside [0, V) is kInvalidArgument naming the id and its position (nothing written).
Status embedding_forward(Context& ctx, const TensorView& ids, const TensorView& table,
                         const TensorView& positions, int64_t seq_len, const TensorView& out);
// d_table[ids[n], :] += d_out[n, :] and d_positions[n % S, :] += d_out[n, :] (when given), for
// n = 0, 1, ... in order (deterministic).
//   [in] d_out [N, D] act; [in,out] d_table [V, D] and d_positions [S_max, D] F, ACCUMULATED.
Status embedding_backward(Context& ctx, const TensorView& ids, const TensorView& d_out,
                          const TensorView& d_table, const TensorView& d_positions,
                          int64_t seq_len);

}  // namespace moe::kernels
