// The Hugging Face transformers layout of a momoe model whose shape is exactly a published
// architecture's, written beside momoe-export's own files (docs/export_format.md, "transformers
// layout"), so that `AutoModelForCausalLM.from_pretrained(DIR/transformers)` loads it with no
// momoe code. Every architecture here has every block pre-norm with RMSNorm, rotary positions, no
// biases in momoe's linear layers, SwiGLU experts with softmax top-k routing (unscaled, no
// groups, no balancing bias), the plain residual and nothing dropped at evaluation:
//   - Mixtral (MixtralForCausalLM, model_type "mixtral"): every block an MoE layer, gates
//     renormalised over the k, no shared experts, no q/k norm;
//   - Qwen2-MoE (Qwen2MoeForCausalLM, "qwen2_moe"): gates renormalised or not (norm_topk_prob),
//     a shared expert gated by sigmoid(y w) in every MoE layer (shared_expert_gate), dense SwiGLU
//     blocks allowed (mlp_only_layers), no q/k norm; its q/k/v biases are written as zeros;
//   - Qwen3-MoE (Qwen3MoeForCausalLM, "qwen3_moe"): each head's q and k normalised (qk_norm),
//     gates renormalised or not, no shared experts, dense SwiGLU blocks allowed.
// transformers' other MoE models differ from anything momoe builds (OLMoE's q/k norms over the
// whole width, DeepSeek-V3's latent attention), so they get momoe's layout only.
#pragma once

#include <string>

#include "core/model/transformer.h"

namespace moe {

// Which transformers architecture a model has exactly the shape of.
struct TransformersLayout {
  // "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"; "" when none
  std::string architecture;
  std::string why_not;  // when none: why not each one (a sentence)
};
TransformersLayout transformers_layout(const ModelConfig& model);

// "" when the model has that architecture's exact shape, else the first reason it has not.
std::string mixtral_mismatch(const ModelConfig& model);
std::string qwen2_moe_mismatch(const ModelConfig& model);
std::string qwen3_moe_mismatch(const ModelConfig& model);

// Writes config.json and model.safetensors (F32, the fp32 masters) of the matching layout into
// `out_dir` (an existing folder). The model must hold every expert and match one architecture
// (kFailedPrecondition naming the reasons otherwise).
Status export_transformers(TransformerLM* model, const std::string& out_dir);

// config.json's text (exposed for tests).
std::string mixtral_config_json(const ModelConfig& model);
std::string qwen2_moe_config_json(const ModelConfig& model);
std::string qwen3_moe_config_json(const ModelConfig& model);

}  // namespace moe
