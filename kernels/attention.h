// Causal multi-head self-attention core on packed projections: for each sequence b and head h,
//   P = softmax(mask(Q K^T / sqrt(Dh))),  O = dropout(P) V
// with Q, K, V the head slices of qkv [B*S, 3D] (columns [0, D), [D, 2D), [2D, 3D); head h owns
// columns h*Dh .. (h+1)*Dh of each) and O written to out [B*S, D] in the same head layout.
// Position i attends to j <= i. Matrix products go through BLAS, one (b, h) at a time.
#pragma once

#include "core/base/device.h"
#include "core/base/rng.h"
#include "core/base/tensor.h"

namespace moe::kernels {

struct AttentionArgs {
  int64_t batch = 0;     // B sequences
  int64_t seq_len = 0;   // S
  int64_t heads = 0;     // H
  float dropout = 0.f;   // on the probabilities, in [0, 1)
  CounterRng rng;        // dropout mask stream
  int64_t sequence_offset = 0;  // global index of sequence 0 (keys the mask)
};

// qkv [B*S, 3D]; out [B*S, D] (overwritten); probs [B, H, S, S] (overwritten: the softmax before
// dropout, zero above the diagonal).
Status attention_forward(const AttentionArgs& args, const TensorView& qkv, const TensorView& out,
                         const TensorView& probs, Stream stream = {});
// d_out [B*S, D] -> d_qkv [B*S, 3D] (overwritten), from the saved qkv and probs.
Status attention_backward(const AttentionArgs& args, const TensorView& d_out,
                          const TensorView& qkv, const TensorView& probs,
                          const TensorView& d_qkv, Stream stream = {});

}  // namespace moe::kernels
