// Causal multi-head self-attention core on packed projections: for each sequence b and head h,
//   P = softmax(mask(Q K^T / sqrt(Dh))),  O = dropout(P) V
// Q, K, V are the head slices of qkv [B*S, 3D] (in [B, S, 3, H, Dh] terms: columns [0, D) are
// q [B, S, H, Dh], [D, 2D) k and [2D, 3D) v, with head h owning columns h*Dh .. (h+1)*Dh of
// each), so the QKV projection's output is used without a split copy. O is written to
// out [B*S, D] = [B, S, H, Dh]. Position i attends to j <= i. The softmax subtracts the row
// maximum and sums in double. Matrix products go through BLAS, one (b, h) at a time.
//
// Dropout on the probabilities keeps element (b, h, i, j) when
//   rng.uniform((((sequence_offset + b) * H + h) * S + i) * S + j) >= dropout
// and scales kept elements by 1 / (1 - dropout). The key depends on the global sequence index,
// not on where the sequence sits in this batch, so masks do not depend on how a global batch is
// split across ranks. dropout = 0 draws nothing.
#pragma once

#include "core/base/device.h"
#include "core/base/rng.h"
#include "core/base/tensor.h"

namespace moe::kernels {

struct AttentionArgs {
  int64_t batch = 0;            // B sequences
  int64_t seq_len = 0;          // S
  int64_t heads = 0;            // H (D = 3D/3 must be divisible by H)
  float dropout = 0.f;          // on the probabilities, in [0, 1)
  CounterRng rng;               // dropout mask stream
  int64_t sequence_offset = 0;  // global index of sequence 0 (keys the mask)
};

// [in] qkv [B*S, 3D] (f32|f64). [out] out [B*S, D], overwritten. [out] probs [B, H, S, S],
// overwritten with the softmax before dropout (zero above the diagonal), saved for backward.
Status attention_forward(const AttentionArgs& args, const TensorView& qkv, const TensorView& out,
                         const TensorView& probs, Stream stream = {});
// [in] d_out [B*S, D]; the saved qkv [B*S, 3D] and probs [B, H, S, S]; args as in forward (the
// dropout mask is redrawn). [out] d_qkv [B*S, 3D] = (dq | dk | dv), overwritten.
Status attention_backward(const AttentionArgs& args, const TensorView& d_out, const TensorView& qkv,
                          const TensorView& probs, const TensorView& d_qkv, Stream stream = {});

}  // namespace moe::kernels
