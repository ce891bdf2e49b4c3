// Causal multi-head self-attention sublayer (x @ W convention, row-major):
//   qkv = rope(qk_norm(x W_qkv + b_qkv)) [N, 3D];  ctx = attention(qkv) [N, D]
//   (kernels/attention.h); y = ctx W_o + b_o [N, D],  with N = B*S rows, sequence-major.
// rope (AttentionOptions::rope_base > 0) turns each head's q and k by its position in the
// sequence (kernels/rope.h; v untouched); without it rope is the identity and the model's
// positions come from the embedding. qk_norm (AttentionOptions::qk_norm, Qwen3-MoE) normalises
// each head's q and each head's k by RMSNorm over the head's Dh columns (kernels/layernorm.h, eps
// AttentionOptions::norm_eps) with the learned weights <prefix>.q_norm.gamma and
// <prefix>.k_norm.gamma [Dh] (ones at initialisation, not decayed); without it, the identity.
// Parameters: <prefix>.w_qkv [D, 3D], <prefix>.b_qkv [3D],
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
  bool qk_norm = false;    // RMSNorm over each head's q and k before RoPE
  double norm_eps = 1e-5;  // its eps
};

class MultiHeadAttention {
 public:
  // Everything backward needs, filled by forward.
  struct Saved {
    Tensor x;               // [N, D] the input
    Tensor qkv;             // [N, 3D] (q and k normalised under qk_norm, then rotated under RoPE)
    Tensor q_in, k_in;      // [N, D] q and k before qk_norm (qk_norm only)
    Tensor q_rstd, k_rstd;  // [N*H] F: their heads' 1 / rms (qk_norm only)
    Tensor lse;             // [B, H, S] F: row logsumexp of the scores
    Tensor ctx;             // [N, D] attention output before W_o
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
  // qk_norm on qkv's q and k columns, in place; their inputs and rstd kept in saved.
  Status qk_norm_forward(const Tensor& qkv, Saved* saved) const;
  // Its transpose on d_qkv's q and k columns, in place; the weights' gradients accumulated.
  Status qk_norm_backward(const Tensor& d_qkv, const Saved& saved) const;

  std::string prefix_;
  Context& ctx_;
  DType act_;
  int64_t d_model_, heads_, max_seq_len_;
  double attention_dropout_;
  double rope_base_;  // 0: no RoPE
  double norm_eps_;
  Parameter* w_qkv_;
  Parameter* b_qkv_;  // nullptr without biases
  Parameter* w_o_;
  Parameter* b_o_;               // nullptr without biases
  Parameter* q_norm_ = nullptr;  // nullptr without qk_norm
  Parameter* k_norm_ = nullptr;
};

}  // namespace moe
