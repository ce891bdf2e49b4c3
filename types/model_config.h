// Plain configuration of the transformer language model: widths, block style and the resolved
// per-block plan (attention + dense FFN or MoE sublayer, with each MoE layer's full config).
// Filled and validated by proto/model_convert.cc; the model trusts it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "types/moe_config.h"

namespace moe {

enum class BlockStyle {
  // The reference code's block (spec/momentum-smoe.md 2.2): h = LN1(h + Attn(h));
  // MoE: h = LN2(h + LN_in(z)) with z the MoE layer's output (x + u, x + gamma p, ...);
  // dense: h = LN3(h + FFN(h)).
  kPostLnDoubleResidual,
  // h = h + Attn(LN1(h)); MoE: h = MoE(x_in = LN2(h), x_base = h); dense: h = h + FFN(LN2(h));
  // a final LN before the head. The momentum recurrence runs on the residual stream h
  // (x_{t+1} = h + gamma p); a robust layer's shifted input is LN2(h) + alpha gamma p (the papers
  // define the variants without LayerNorms; this is our reading for pre-LN).
  kPreLn,
};

// The normalisation every norm of the model uses (the blocks' and the final one).
enum class NormKind {
  kLayerNorm,  // (x - mean) * rstd * gamma + beta
  kRmsNorm,    // x * rsqrt(mean(x^2) + eps) * gamma
};

// Where the model gets token positions from.
enum class PositionKind {
  kLearned,  // a learned embedding [seq_len, D] added to the token embedding
  kRope,     // rotary embeddings on each head's q and k; pairs (i, i + Dh/2), as Llama/Mixtral
};

struct BlockPlan {
  bool moe = false;        // false: dense FFN sublayer
  MoeLayerConfig moe_cfg;  // when moe (d_model filled in)
};

struct ModelConfig {
  int64_t vocab_size = 0;  // from the vocabulary when 0 in the file
  int64_t d_model = 128;
  int64_t n_heads = 4;
  int64_t seq_len = 64;  // sequence length (and the number of learned positions)
  int64_t d_ff = 256;    // dense FFN hidden width
  ExpertActivation activation = ExpertActivation::kRelu;  // dense FFN activation
  double dropout = 0.1;                                   // residual, embedding and FFN dropout
  double attention_dropout = 0.0;                         // on attention probabilities
  bool tie_embeddings = false;
  BlockStyle block_style = BlockStyle::kPostLnDoubleResidual;
  double init_std = 0.02;
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  PositionKind position = PositionKind::kLearned;
  double rope_base = 10000.0;  // RoPE's theta: pair i turns at base^(-2i/Dh) radians per position
  bool linear_bias = true;     // false: no bias in attention, dense FFN, experts, router
  bool qk_norm = false;        // Qwen3-MoE: RMSNorm over each head's q and k before RoPE
  std::string arch;            // the arch string the plan came from (may be empty)
  std::vector<BlockPlan> blocks;

  int64_t num_moe_layers() const;
  // Why evaluating this model depends on which sequences share a batch, or "" when it does not:
  // an AC router's metric comes from the statistics of the batch it routes (the paper's rule,
  // spec/sparsemixer-acmoe.md B.9 #8), and an evaluation capacity drops by the batch's loads.
  std::string batch_dependent_evaluation() const;
  // Checks the widths and the plan (AC never on the first MoE layer, Adam only on it, every MoE
  // layer's config valid for `ep_size`). Errors name the field or block.
  Status validate(int ep_size = 1) const;
};

// Expands the reference code's arch string: each block is 's' (attention) followed by one of
// g (SMoE), m (MomentumSMoE), a (AdamSMoE), r (Robust MomentumSMoE), c (AC router, plain
// residual) or f (dense FFN); e.g. "sgsmsm", "sgsfsgsf". MoE blocks start from `moe_default`.
StatusOr<std::vector<BlockPlan>> expand_arch_string(const std::string& arch,
                                                    const MoeLayerConfig& moe_default);

}  // namespace moe
