// Causal multi-head self-attention sublayer:
//   qkv = x W_qkv + b_qkv; ctx = attention(qkv); y = ctx W_o + b_o
// Parameters: <prefix>.w_qkv [D, 3D], <prefix>.b_qkv [3D], <prefix>.w_o [D, D], <prefix>.b_o [D].
// Dropout on the attention probabilities only (the block applies residual dropout).
#pragma once

#include <string>

#include "core/base/rng.h"
#include "core/layers/parameters.h"

namespace moe {

class MultiHeadAttention {
 public:
  struct Saved {
    Tensor x;      // [B*S, D]
    Tensor qkv;    // [B*S, 3D]
    Tensor probs;  // [B, H, S, S]
    Tensor ctx;    // [B*S, D]
    int64_t batch = 0;
    int64_t sequence_offset = 0;
    float dropout = 0.f;
    CounterRng rng;
  };
  MultiHeadAttention(const std::string& prefix, int64_t d_model, int64_t heads, int64_t seq_len,
                     double attention_dropout, ParameterSet* params);
  // x, y [B*S, D]; y overwritten. training enables the probability dropout.
  Status forward(const TensorView& x, int64_t batch, int64_t sequence_offset, bool training,
                 CounterRng rng, const TensorView& y, Saved* saved) const;
  // dx overwritten; parameter gradients accumulate.
  Status backward(const TensorView& dy, const Saved& saved, const TensorView& dx) const;

 private:
  int64_t d_model_, heads_, seq_len_;
  double attention_dropout_;
  Parameter* w_qkv_;
  Parameter* b_qkv_;
  Parameter* w_o_;
  Parameter* b_o_;
};

}  // namespace moe
