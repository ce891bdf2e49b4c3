#include "core/checkpoint/hf_export.h"

#include <nlohmann/json.hpp>

#include "core/checkpoint/safetensors.h"
#include "io/file_util.h"

namespace moe {
namespace {

using Json = nlohmann::ordered_json;

// Why one MoE layer's config is not Mixtral's, or "".
std::string moe_mismatch(const MoeLayerConfig& m, const MoeLayerConfig& first) {
  if (m.activation != ExpertActivation::kSwiglu) return "its experts are not SwiGLU";
  if (m.residual != ResidualKind::kPlain) return "its residual is not the plain one";
  if (m.ac.enabled || m.sparsemixer.enabled) return "it routes with the AC router or SparseMixer";
  if (m.score_function != ScoreFunction::kSoftmax || !m.renormalize || m.routed_scaling != 1.0) {
    return "its gates are not the softmax renormalised over the top k";
  }
  if (m.shared_experts > 0) return "it has shared experts";
  if (m.expert_groups > 1 || m.bias_update_rate > 0) {
    return "it chooses experts with groups or a balancing bias";
  }
  if (!m.dropless && m.eval_capacity_factor > 0) return "it drops tokens at evaluation";
  if (m.num_experts != first.num_experts || m.top_k != first.top_k ||
      m.d_expert != first.d_expert) {
    return "its experts differ from the first MoE layer's";
  }
  return "";
}

// A host copy of parameter `name`'s fp32 master.
StatusOr<Tensor> master_of(TransformerLM* model, const std::string& name) {
  const Parameter* p = model->params().find(name);
  if (p == nullptr) return internal_error("the Mixtral export needs parameter ", name);
  if (p->master.dtype() != DType::kF32) {
    return failed_precondition_error("the Mixtral export writes F32 masters; ", name, " is ",
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

// The attention, norms and router of block i (a [D, 3D] qkv weight split into q, k and v).
Status add_block(TransformerLM* model, int i, Tensors* out) {
  const int64_t d = model->config().d_model;
  const std::string b = str_cat("blocks.", i, "."), hf = str_cat("model.layers.", i, ".");
  MOE_ASSIGN_OR_RETURN(Tensor ln1, master_of(model, b + "ln1.gamma"));
  MOE_ASSIGN_OR_RETURN(Tensor ln2, master_of(model, b + "ln2.gamma"));
  MOE_ASSIGN_OR_RETURN(Tensor qkv, master_of(model, b + "attn.w_qkv"));
  MOE_ASSIGN_OR_RETURN(Tensor wo, master_of(model, b + "attn.w_o"));
  MOE_ASSIGN_OR_RETURN(Tensor router, master_of(model, b + "moe.w_router"));
  out->add(hf + "input_layernorm.weight", std::move(ln1));
  out->add(hf + "post_attention_layernorm.weight", std::move(ln2));
  const char* proj[] = {"q_proj", "k_proj", "v_proj"};
  for (int j = 0; j < 3; ++j) {
    out->add(str_cat(hf, "self_attn.", proj[j], ".weight"),
             columns_transposed(qkv.data<float>(), d, 3 * d, j * d, (j + 1) * d));
  }
  out->add(hf + "self_attn.o_proj.weight", columns_transposed(wo.data<float>(), d, d, 0, d));
  const int64_t e = router.dim(1);
  out->add(hf + "block_sparse_moe.gate.weight",
           columns_transposed(router.data<float>(), d, e, 0, e));
  return Status::OK();
}

// Block i's experts: momoe's w1 [E, D, 2F] ([gate | up]) -> w1 (gate) and w3 (up) [F, D];
// w2 [E, F, D] -> w2 [D, F].
Status add_experts(TransformerLM* model, int i, Tensors* out) {
  const std::string b = str_cat("blocks.", i, ".");
  MOE_ASSIGN_OR_RETURN(Tensor w1, master_of(model, b + "moe.w1"));
  MOE_ASSIGN_OR_RETURN(Tensor w2, master_of(model, b + "moe.w2"));
  const int64_t e = w1.dim(0), d = w1.dim(1), f = w2.dim(1);
  if (w1.dim(2) != 2 * f) return internal_error(b, "moe.w1 is not [E, D, 2F] (SwiGLU)");
  for (int64_t x = 0; x < e; ++x) {
    const std::string hf = str_cat("model.layers.", i, ".block_sparse_moe.experts.", x, ".");
    const float* g = w1.data<float>() + x * d * 2 * f;
    out->add(hf + "w1.weight", columns_transposed(g, d, 2 * f, 0, f));
    out->add(hf + "w3.weight", columns_transposed(g, d, 2 * f, f, 2 * f));
    out->add(hf + "w2.weight", columns_transposed(w2.data<float>() + x * f * d, f, d, 0, d));
  }
  return Status::OK();
}

}  // namespace

std::string mixtral_mismatch(const ModelConfig& m) {
  if (m.block_style != BlockStyle::kPreLn) return "its blocks are not pre-norm";
  if (m.norm != NormKind::kRmsNorm) return "its norm is not RMSNorm";
  if (m.position != PositionKind::kRope) return "its positions are not rotary";
  if (m.linear_bias) return "its linear layers have biases";
  if (m.blocks.empty()) return "it has no blocks";
  for (size_t b = 0; b < m.blocks.size(); ++b) {
    if (!m.blocks[b].moe) return str_cat("block ", b, " is dense");
    const std::string why = moe_mismatch(m.blocks[b].moe_cfg, m.blocks[0].moe_cfg);
    if (!why.empty()) return str_cat("block ", b, ": ", why);
  }
  return "";
}

std::string mixtral_config_json(const ModelConfig& m) {
  const MoeLayerConfig& moe = m.blocks.at(0).moe_cfg;
  Json j;
  j["architectures"] = Json::array({"MixtralForCausalLM"});
  j["model_type"] = "mixtral";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = moe.d_expert;
  j["num_hidden_layers"] = m.blocks.size();
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.n_heads;
  j["head_dim"] = m.d_model / m.n_heads;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.seq_len;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.rope_base;
  j["num_local_experts"] = moe.num_experts;
  j["num_experts_per_tok"] = moe.top_k;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["sliding_window"] = nullptr;
  j["attention_dropout"] = 0.0;
  j["router_jitter_noise"] = 0.0;
  j["router_aux_loss_coef"] = moe.balance_loss_coef;
  j["output_router_logits"] = false;
  j["initializer_range"] = m.init_std;
  j["torch_dtype"] = "float32";
  j["use_cache"] = false;
  return j.dump(2) + "\n";
}

Status export_mixtral(TransformerLM* model, const std::string& out_dir) {
  const ModelConfig& m = model->config();
  if (const std::string why = mixtral_mismatch(m); !why.empty()) {
    return failed_precondition_error("not Mixtral's shape: ", why);
  }
  Tensors t;
  MOE_ASSIGN_OR_RETURN(Tensor embed, master_of(model, "embed.tokens"));
  t.add("model.embed_tokens.weight", std::move(embed));
  for (int i = 0; i < static_cast<int>(m.blocks.size()); ++i) {
    MOE_RETURN_IF_ERROR(add_block(model, i, &t));
    MOE_RETURN_IF_ERROR(add_experts(model, i, &t));
  }
  MOE_ASSIGN_OR_RETURN(Tensor norm, master_of(model, "final_ln.gamma"));
  t.add("model.norm.weight", std::move(norm));
  if (!m.tie_embeddings) {
    MOE_ASSIGN_OR_RETURN(Tensor head, master_of(model, "head.weight"));
    t.add("lm_head.weight", std::move(head));
  }
  t.writer.set_metadata("format", "pt");
  MOE_RETURN_IF_ERROR(t.writer.write(out_dir + "/model.safetensors"));
  return io::write_file_atomic(out_dir + "/config.json", mixtral_config_json(m));
}

}  // namespace moe
