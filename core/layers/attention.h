// Causal multi-head self-attention sublayer (x @ W convention, row-major):
//   qkv = rope(x W_qkv + b_qkv) [N, 3D];  ctx = attention(qkv) [N, D] (kernels/attention.h);
//   y = ctx W_o + b_o [N, D],  with N = B*S rows, sequence-major.
// rope (AttentionOptions::rope_base > 0) turns each head's q and k by its position in the
// sequence (kernels/rope.h; v untouched); without it rope is the identity and the model's
// positions come from the embedding. Parameters: <prefix>.w_qkv [D, 3D], <prefix>.b_qkv [3D],
// <prefix>.w_o [D, D], <prefix>.b_o [D]; without AttentionOptions::bias the two biases are
// neither registered nor added (biases are not weight-decayed; the matrices are GEMM operands,
// bf16 under BF16). Dropout applies to the attention probabilities only, keyed by the global
// sequence index (so masks do not depend on how batches are split across ranks); the block applies
// residual dropout. The forward saves the rotated qkv the attention consumed and the row
// logsumexp, not the [B, H, S, S] probabilities. Forward and backward return new tensors;
// backward accumulates (+=) parameter gradients. Errors name the prefix.
#pragma once

#include <string>

#include "base/rng.h"
#include "core/layers/parameters.h"

namespace moe {

// What the sublayer has beyond the GPT-2 one (the defaults).
struct AttentionOptions {
  double rope_base = 0.0;  // > 0: RoPE on q and k with this base; 0: none
  bool bias = true;        // false: no b_qkv and b_o
};

class MultiHeadAttention {
 public:
  // Everything backward needs, filled by forward.
  struct Saved {
    Tensor x;    // [N, D] the input
    Tensor qkv;  // [N, 3D] (q and k rotated under RoPE)
    Tensor lse;  // [B, H, S] F: row logsumexp of the scores
    Tensor ctx;  // [N, D] attention output before W_o
    int64_t batch = 0;
    int64_t seq_len = 0;
    int64_t sequence_offset = 0;
    float dropout = 0.f;  // 0 when not training
    CounterRng rng;
  };
  // heads must divide d_model (with RoPE, into an even head width). max_seq_len bounds S.
  MultiHeadAttention(const std::string& prefix, int64_t d_model, int64_t heads, int64_t max_seq_len,
                     double attention_dropout, ParameterSet* params,
                     const AttentionOptions& options = {});
  // [in] x [B*S, D] (B = batch sequences of S <= max_seq_len tokens); sequence_offset: the global
  // index of this batch's first sequence (keys the dropout mask); training enables dropout, drawn
  // from rng. Returns y [B*S, D].
  StatusOr<Tensor> forward(const Tensor& x, int64_t batch, int64_t sequence_offset, bool training,
                           CounterRng rng, Saved* saved) const;
  // [in] dy [B*S, D]; returns dx [B*S, D].
  StatusOr<Tensor> backward(const Tensor& dy, const Saved& saved) const;

 private:
  Status check(const char* name, const TensorView& t, int64_t rows) const;

  std::string prefix_;
  Context& ctx_;
  DType act_;
  int64_t d_model_, heads_, max_seq_len_;
  double attention_dropout_;
  double rope_base_;  // 0: no RoPE
  Parameter* w_qkv_;
  Parameter* b_qkv_;  // nullptr without biases
  Parameter* w_o_;
  Parameter* b_o_;  // nullptr without biases
};

}  // namespace moe
