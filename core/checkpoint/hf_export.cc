#include "core/checkpoint/hf_export.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/checkpoint/safetensors.h"
#include "io/file_util.h"

namespace moe {
namespace {

using Json = nlohmann::ordered_json;

enum class Family { kMixtral, kQwen2Moe, kQwen3Moe };

// Why one MoE layer's routing is neither architecture's, or "".
std::string routing_mismatch(const MoeLayerConfig& m) {
  if (m.activation != ExpertActivation::kSwiglu) return "its experts are not SwiGLU";
  if (m.residual != ResidualKind::kPlain) return "its residual is not the plain one";
  if (m.ac.enabled || m.sparsemixer.enabled) return "it routes with the AC router or SparseMixer";
  if (m.expert_groups > 1 || m.bias_update_rate > 0) {
    return "it chooses experts with groups or a balancing bias";
  }
  if (!m.dropless && m.eval_capacity_factor > 0) return "it drops tokens at evaluation";
  return "";
}

// Why one MoE layer's config is not the family's, or "".
std::string moe_mismatch(const MoeLayerConfig& m, const MoeLayerConfig& first, Family family) {
  if (const std::string why = routing_mismatch(m); !why.empty()) return why;
  const bool softmax = m.score_function == ScoreFunction::kSoftmax && m.routed_scaling == 1.0;
  if (family == Family::kMixtral) {
    if (!softmax || !m.renormalize) {
      return "its gates are not the softmax renormalised over the top k";
    }
  } else if (!softmax) {
    return "its gates are not the softmax's probabilities (unscaled)";
  }
  if (family == Family::kQwen2Moe) {
    if (m.shared_experts == 0 || !m.shared_expert_gate) return "it has no gated shared expert";
  } else if (m.shared_experts > 0) {
    return "it has shared experts";
  }
  if (m.num_experts != first.num_experts || m.top_k != first.top_k ||
      m.d_expert != first.d_expert || m.renormalize != first.renormalize ||
      m.shared_width() != first.shared_width()) {
    return "its experts differ from the first MoE layer's";
  }
  return "";
}

// The block of current models with `family`'s layers, or why not.
std::string model_mismatch(const ModelConfig& m, Family family) {
  if (m.block_style != BlockStyle::kPreLn) return "its blocks are not pre-norm";
  if (m.norm != NormKind::kRmsNorm) return "its norm is not RMSNorm";
  if (m.position != PositionKind::kRope) return "its positions are not rotary";
  if (m.linear_bias) return "its linear layers have biases";
  if (family == Family::kQwen3Moe && !m.qk_norm) return "its heads' q and k are not normalised";
  if (family != Family::kQwen3Moe && m.qk_norm) return "it normalises its heads' q and k";
  const BlockPlan* first = nullptr;
  for (const BlockPlan& b : m.blocks) first = first != nullptr || !b.moe ? first : &b;
  if (first == nullptr) return "it has no MoE layer";
  for (size_t b = 0; b < m.blocks.size(); ++b) {
    if (!m.blocks[b].moe) {
      if (family == Family::kMixtral) return str_cat("block ", b, " is dense");
      if (m.activation != ExpertActivation::kSwiglu) return str_cat("block ", b, " is not SwiGLU");
      continue;
    }
    const std::string why = moe_mismatch(m.blocks[b].moe_cfg, first->moe_cfg, family);
    if (!why.empty()) return str_cat("block ", b, ": ", why);
  }
  return "";
}

const MoeLayerConfig& first_moe(const ModelConfig& m) {
  for (const BlockPlan& b : m.blocks) {
    if (b.moe) return b.moe_cfg;
  }
  return m.blocks.at(0).moe_cfg;  // unreachable for a model that matched
}

// A host copy of parameter `name`'s fp32 master.
StatusOr<Tensor> master_of(TransformerLM* model, const std::string& name) {
  const Parameter* p = model->params().find(name);
  if (p == nullptr) return internal_error("the transformers export needs parameter ", name);
  if (p->master.dtype() != DType::kF32) {
    return failed_precondition_error("the transformers export writes F32 masters; ", name, " is ",
                                     dtype_name(p->master.dtype()));
  }
  return model->context().read_back(p->master);
}

// Columns [c0, c1) of the row-major [rows, cols] matrix at src, transposed: [c1 - c0, rows]
// (nn.Linear's [out, in] layout of a slice of momoe's [in, out] weight).
Tensor columns_transposed(const float* src, int64_t rows, int64_t cols, int64_t c0, int64_t c1) {
  Tensor out = Tensor::empty({c1 - c0, rows}, DType::kF32);
  float* dst = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = c0; c < c1; ++c) dst[(c - c0) * rows + r] = src[r * cols + c];
  }
  return out;
}

// Collects the exported tensors (the writer holds views into `keep`).
struct Tensors {
  ckpt::SafetensorsWriter writer;
  std::vector<Tensor> keep;
  void add(const std::string& name, Tensor t) {
    keep.push_back(std::move(t));
    writer.add(name, keep.back().view());
  }
};

// A SwiGLU FFN's matrices (momoe's w1 [D, 2F] = [gate | up] at g, w2 [F, D] at w2) as three
// nn.Linear weights named `prefix` + names[0..2] (gate, up, down).
void add_swiglu(const float* g, const float* w2, int64_t d, int64_t f, const std::string& prefix,
                const char* const names[3], Tensors* out) {
  out->add(prefix + names[0], columns_transposed(g, d, 2 * f, 0, f));
  out->add(prefix + names[1], columns_transposed(g, d, 2 * f, f, 2 * f));
  out->add(prefix + names[2], columns_transposed(w2, f, d, 0, d));
}

// The attention and norms of block i (a [D, 3D] qkv weight split into q, k and v); Qwen2-MoE's
// q/k/v biases, which momoe's block has not, as zeros; Qwen3-MoE's per-head q and k norms.
Status add_attention(TransformerLM* model, int i, Family family, Tensors* out) {
  const int64_t d = model->config().d_model;
  const std::string b = str_cat("blocks.", i, "."), hf = str_cat("model.layers.", i, ".");
  MOE_ASSIGN_OR_RETURN(Tensor ln1, master_of(model, b + "ln1.gamma"));
  MOE_ASSIGN_OR_RETURN(Tensor ln2, master_of(model, b + "ln2.gamma"));
  MOE_ASSIGN_OR_RETURN(Tensor qkv, master_of(model, b + "attn.w_qkv"));
  MOE_ASSIGN_OR_RETURN(Tensor wo, master_of(model, b + "attn.w_o"));
  out->add(hf + "input_layernorm.weight", std::move(ln1));
  out->add(hf + "post_attention_layernorm.weight", std::move(ln2));
  const char* proj[] = {"q_proj", "k_proj", "v_proj"};
  for (int j = 0; j < 3; ++j) {
    out->add(str_cat(hf, "self_attn.", proj[j], ".weight"),
             columns_transposed(qkv.data<float>(), d, 3 * d, j * d, (j + 1) * d));
    if (family == Family::kQwen2Moe) {
      out->add(str_cat(hf, "self_attn.", proj[j], ".bias"), Tensor::zeros({d}, DType::kF32));
    }
  }
  out->add(hf + "self_attn.o_proj.weight", columns_transposed(wo.data<float>(), d, d, 0, d));
  if (family == Family::kQwen3Moe) {
    MOE_ASSIGN_OR_RETURN(Tensor q_norm, master_of(model, b + "attn.q_norm.gamma"));
    MOE_ASSIGN_OR_RETURN(Tensor k_norm, master_of(model, b + "attn.k_norm.gamma"));
    out->add(hf + "self_attn.q_norm.weight", std::move(q_norm));
    out->add(hf + "self_attn.k_norm.weight", std::move(k_norm));
  }
  return Status::OK();
}

// Block i's router and experts (momoe's w1 [E, D, 2F] and w2 [E, F, D]): Mixtral's
// block_sparse_moe.{gate, experts.e.w1 (gate) / w3 (up) / w2}, Qwen2-MoE's mlp.{gate,
// experts.e.gate_proj / up_proj / down_proj}.
Status add_experts(TransformerLM* model, int i, Family family, Tensors* out) {
  const std::string b = str_cat("blocks.", i, ".");
  MOE_ASSIGN_OR_RETURN(Tensor router, master_of(model, b + "moe.w_router"));
  MOE_ASSIGN_OR_RETURN(Tensor w1, master_of(model, b + "moe.w1"));
  MOE_ASSIGN_OR_RETURN(Tensor w2, master_of(model, b + "moe.w2"));
  const int64_t e = w1.dim(0), d = w1.dim(1), f = w2.dim(1);
  if (w1.dim(2) != 2 * f) return internal_error(b, "moe.w1 is not [E, D, 2F] (SwiGLU)");
  const bool mixtral = family == Family::kMixtral;
  const std::string layer = str_cat("model.layers.", i, mixtral ? ".block_sparse_moe." : ".mlp.");
  out->add(layer + "gate.weight", columns_transposed(router.data<float>(), d, e, 0, e));
  static const char* const kMixtral[3] = {"w1.weight", "w3.weight", "w2.weight"};
  static const char* const kQwen[3] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
  for (int64_t x = 0; x < e; ++x) {
    add_swiglu(w1.data<float>() + x * d * 2 * f, w2.data<float>() + x * f * d, d, f,
               str_cat(layer, "experts.", x, "."), mixtral ? kMixtral : kQwen, out);
  }
  return Status::OK();
}

// Qwen2-MoE's shared expert and its gate (block i an MoE layer), or a Qwen MLP (a dense block).
Status add_qwen_ffn(TransformerLM* model, int i, bool moe, Tensors* out) {
  static const char* const kNames[3] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
  const std::string b = str_cat("blocks.", i, moe ? ".moe.shared." : ".ffn.");
  const std::string hf = str_cat("model.layers.", i, moe ? ".mlp.shared_expert." : ".mlp.");
  MOE_ASSIGN_OR_RETURN(Tensor w1, master_of(model, b + "w1"));
  MOE_ASSIGN_OR_RETURN(Tensor w2, master_of(model, b + "w2"));
  const int64_t d = w1.dim(0), f = w2.dim(0);
  add_swiglu(w1.data<float>(), w2.data<float>(), d, f, hf, kNames, out);
  if (moe) {
    MOE_ASSIGN_OR_RETURN(Tensor gate, master_of(model, b + "w_gate"));
    out->add(str_cat("model.layers.", i, ".mlp.shared_expert_gate.weight"), gate.reshape({1, d}));
  }
  return Status::OK();
}

// The fields both config.json files share.
Json common_config(const ModelConfig& m, const char* architecture, const char* model_type) {
  Json j;
  j["architectures"] = Json::array({architecture});
  j["model_type"] = model_type;
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.d_model;
  j["num_hidden_layers"] = m.blocks.size();
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.n_heads;
  j["head_dim"] = m.d_model / m.n_heads;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.seq_len;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.rope_base;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["attention_dropout"] = 0.0;
  j["output_router_logits"] = false;
  j["initializer_range"] = m.init_std;
  j["torch_dtype"] = "float32";
  j["use_cache"] = false;
  return j;
}

// The fields Qwen2-MoE's and Qwen3-MoE's config.json share (no shared expert's yet).
Json qwen_config(const ModelConfig& m, const char* architecture, const char* model_type) {
  const MoeLayerConfig& moe = first_moe(m);
  Json j = common_config(m, architecture, model_type);
  Json dense = Json::array();
  for (size_t b = 0; b < m.blocks.size(); ++b) {
    if (!m.blocks[b].moe) dense.push_back(b);
  }
  // The dense blocks' MLP width (transformers needs one even when every block is an MoE layer).
  j["intermediate_size"] =
      dense.empty() ? std::max<int64_t>(moe.shared_width(), moe.d_expert) : m.d_ff;
  j["moe_intermediate_size"] = moe.d_expert;
  j["num_experts"] = moe.num_experts;
  j["num_experts_per_tok"] = moe.top_k;
  j["norm_topk_prob"] = moe.renormalize;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = dense;
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = m.blocks.size();
  j["router_aux_loss_coef"] = moe.balance_loss_coef;
  return j;
}

Family family_of(const std::string& architecture) {
  if (architecture == "MixtralForCausalLM") return Family::kMixtral;
  return architecture == "Qwen2MoeForCausalLM" ? Family::kQwen2Moe : Family::kQwen3Moe;
}

}  // namespace

std::string mixtral_mismatch(const ModelConfig& m) { return model_mismatch(m, Family::kMixtral); }

std::string qwen2_moe_mismatch(const ModelConfig& m) {
  return model_mismatch(m, Family::kQwen2Moe);
}

std::string qwen3_moe_mismatch(const ModelConfig& m) {
  return model_mismatch(m, Family::kQwen3Moe);
}

TransformersLayout transformers_layout(const ModelConfig& m) {
  const std::string mixtral = mixtral_mismatch(m);
  if (mixtral.empty()) return {"MixtralForCausalLM", ""};
  const std::string qwen2 = qwen2_moe_mismatch(m);
  if (qwen2.empty()) return {"Qwen2MoeForCausalLM", ""};
  const std::string qwen3 = qwen3_moe_mismatch(m);
  if (qwen3.empty()) return {"Qwen3MoeForCausalLM", ""};
  return {"", str_cat("not Mixtral's shape: ", mixtral, "; not Qwen2-MoE's: ", qwen2,
                      "; not Qwen3-MoE's: ", qwen3)};
}

std::string mixtral_config_json(const ModelConfig& m) {
  const MoeLayerConfig& moe = first_moe(m);
  Json j = common_config(m, "MixtralForCausalLM", "mixtral");
  j["intermediate_size"] = moe.d_expert;
  j["num_local_experts"] = moe.num_experts;
  j["num_experts_per_tok"] = moe.top_k;
  j["sliding_window"] = nullptr;
  j["router_jitter_noise"] = 0.0;
  j["router_aux_loss_coef"] = moe.balance_loss_coef;
  return j.dump(2) + "\n";
}

std::string qwen2_moe_config_json(const ModelConfig& m) {
  Json j = qwen_config(m, "Qwen2MoeForCausalLM", "qwen2_moe");
  j["shared_expert_intermediate_size"] = first_moe(m).shared_width();
  return j.dump(2) + "\n";
}

std::string qwen3_moe_config_json(const ModelConfig& m) {
  Json j = qwen_config(m, "Qwen3MoeForCausalLM", "qwen3_moe");
  j["attention_bias"] = false;
  return j.dump(2) + "\n";
}

Status export_transformers(TransformerLM* model, const std::string& out_dir) {
  const ModelConfig& m = model->config();
  const TransformersLayout layout = transformers_layout(m);
  if (layout.architecture.empty()) return failed_precondition_error(layout.why_not);
  const Family family = family_of(layout.architecture);
  Tensors t;
  MOE_ASSIGN_OR_RETURN(Tensor embed, master_of(model, "embed.tokens"));
  t.add("model.embed_tokens.weight", std::move(embed));
  for (int i = 0; i < static_cast<int>(m.blocks.size()); ++i) {
    MOE_RETURN_IF_ERROR(add_attention(model, i, family, &t));
    const bool moe = m.blocks[i].moe;
    if (moe) MOE_RETURN_IF_ERROR(add_experts(model, i, family, &t));
    // Qwen's shared expert (Qwen2-MoE) or dense MLP (either); Mixtral has neither.
    const bool qwen_ffn = family == Family::kQwen2Moe || (family == Family::kQwen3Moe && !moe);
    if (qwen_ffn) MOE_RETURN_IF_ERROR(add_qwen_ffn(model, i, moe, &t));
  }
  MOE_ASSIGN_OR_RETURN(Tensor norm, master_of(model, "final_ln.gamma"));
  t.add("model.norm.weight", std::move(norm));
  if (!m.tie_embeddings) {
    MOE_ASSIGN_OR_RETURN(Tensor head, master_of(model, "head.weight"));
    t.add("lm_head.weight", std::move(head));
  }
  t.writer.set_metadata("format", "pt");
  MOE_RETURN_IF_ERROR(t.writer.write(out_dir + "/model.safetensors"));
  const std::string json = family == Family::kMixtral    ? mixtral_config_json(m)
                           : family == Family::kQwen2Moe ? qwen2_moe_config_json(m)
                                                         : qwen3_moe_config_json(m);
  return io::write_file_atomic(out_dir + "/config.json", json);
}

}  // namespace moe
