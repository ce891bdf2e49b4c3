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
  int64_t dense = S * D + V * D;  // positions, token embedding
  z.lookup_params = S * D;
  if (!m.tie_embeddings) {
    dense += V * D;  // the output head's own weight
    z.lookup_params += V * D;
  }
  if (!post) dense += 2 * D;  // the final LayerNorm
  int64_t inactive = 0;
  for (const BlockPlan& b : m.blocks) {
    dense += 4 * D * D + 4 * D + 4 * D;  // attention (qkv, o and their biases), ln1, ln2
    if (!b.moe) {
      dense += 2 * D * m.d_ff + m.d_ff + D;
      continue;
    }
    const MoeLayerConfig& c = b.moe_cfg;
    if (post) dense += 2 * D;                                          // ln_in
    dense += D * c.num_experts + (c.linear_bias ? c.num_experts : 0);  // the router
    if (c.sparsemixer.enabled && c.sparsemixer.omega) dense += D;
    const int64_t per_expert = 2 * D * c.d_expert + c.d_expert + D;
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
