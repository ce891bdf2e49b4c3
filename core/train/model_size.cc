#include "core/train/model_size.h"

#include <cmath>
#include <cstdio>

namespace moe {

// The parameters as the layers register them (core/layers: embedding, attention, layer_norm,
// dense_ffn, moe_router, expert_ffn, moe_layer); tests/core/model_size_test.cc holds the count
// against a built model's tensors for every config family.
ModelSize model_size(const ModelConfig& m) {
  const int64_t D = m.d_model, V = m.vocab_size, S = m.seq_len;
  const bool post = m.block_style == BlockStyle::kPostLnDoubleResidual;
  ModelSize z;
  const int64_t positions = m.position == PositionKind::kLearned ? S * D : 0;  // none under RoPE
  int64_t dense = positions + V * D;  // positions, token embedding
  z.lookup_params = positions;
  if (!m.tie_embeddings) {
    dense += V * D;  // the output head's own weight
    z.lookup_params += V * D;
  }
  // Each norm's parameters: gamma, and LayerNorm's beta.
  const int64_t norm = m.norm == NormKind::kRmsNorm ? D : 2 * D;
  if (!post) dense += norm;  // the final norm
  // Attention biases; qk_norm's weights ([Dh] each for q and k).
  const int64_t attention_biases =
      (m.linear_bias ? 4 * D : 0) + (m.qk_norm ? 2 * (D / m.n_heads) : 0);
  int64_t inactive = 0;
  for (const BlockPlan& b : m.blocks) {
    dense += 4 * D * D + attention_biases + 2 * norm;  // attention (qkv, o, biases), ln1, ln2
    if (!b.moe) {
      dense += ffn_params(D, m.d_ff, m.activation, m.linear_bias).total();
      continue;
    }
    const MoeLayerConfig& c = b.moe_cfg;
    if (post) dense += norm;                                           // ln_in
    dense += D * c.num_experts + (c.linear_bias ? c.num_experts : 0);  // the router
    if (c.bias_update_rate > 0) dense += c.num_experts;                // loss-free balancing's bias
    if (c.sparsemixer.enabled && c.sparsemixer.omega) dense += D;
    // Shared experts: dense, always active (one FFN of their summed width).
    if (c.shared_experts > 0) {
      dense += ffn_params(D, c.shared_width(), c.activation, c.linear_bias).total();
      if (c.shared_expert_gate) dense += D;  // w_gate [D, 1]
    }
    const int64_t per_expert = ffn_params(D, c.d_expert, c.activation, c.linear_bias).total();
    z.expert_params += c.num_experts * per_expert;
    inactive += (c.num_experts - c.top_k) * per_expert;
  }
  z.total_params = dense + z.expert_params;
  z.active_params = z.total_params - inactive;
  const double layers = static_cast<double>(m.blocks.size());
  z.train_flops_per_token = 6.0 * static_cast<double>(z.matmul_params()) +
                            12.0 * layers * static_cast<double>(D) * static_cast<double>(S);
  return z;
}

FfnParams ffn_params(int64_t d_model, int64_t d_ff, ExpertActivation activation, bool bias) {
  const int64_t f1 = first_matrix_cols(activation, d_ff);
  FfnParams p;
  p.matrices = d_model * f1 + d_ff * d_model;
  p.biases = bias ? f1 + d_model : 0;
  return p;
}

std::string si_count(double value, const std::string& unit) {
  static const char* const kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  while (std::fabs(value) >= 999.5 && i < 6) {
    value /= 1000.0;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), i == 0 ? "%.0f" : "%.3g", value);
  return str_cat(buf, unit.empty() ? "" : " ", kPrefixes[i], unit);
}

}  // namespace moe
