// The Hugging Face transformers layout of a momoe model whose shape is exactly a published
// architecture's, written beside momoe-export's own files (docs/export_format.md, "transformers
// layout"), so that `AutoModelForCausalLM.from_pretrained(DIR/transformers)` loads it with no
// momoe code. One architecture today: Mixtral (MixtralForCausalLM, model_type "mixtral"): every
// block pre-norm with RMSNorm, rotary positions, no biases, an MoE layer of SwiGLU experts with
// softmax top-k routing renormalised over the k, the plain residual, no shared experts and
// nothing dropped at evaluation. transformers' other MoE models differ from anything momoe
// builds (Qwen2-MoE's gated shared expert and qkv biases, Qwen3-MoE's and OLMoE's q/k norms,
// DeepSeek-V3's latent attention), so they get momoe's layout only.
#pragma once

#include <string>

#include "core/model/transformer.h"

namespace moe {

// "" when the model has Mixtral's exact shape, else the first reason it has not (a sentence).
std::string mixtral_mismatch(const ModelConfig& model);

// Writes config.json and model.safetensors (F32, the fp32 masters) of the Mixtral layout into
// `out_dir` (an existing folder). The model must hold every expert and have Mixtral's shape
// (mixtral_mismatch empty: kFailedPrecondition naming the reason otherwise).
Status export_mixtral(TransformerLM* model, const std::string& out_dir);

// config.json's text (exposed for tests).
std::string mixtral_config_json(const ModelConfig& model);

}  // namespace moe
