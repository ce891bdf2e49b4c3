#include "core/checkpoint/model_export.h"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "core/checkpoint/safetensors.h"
#include "core/layers/moe_layer.h"
#include "io/file_util.h"

namespace moe {
namespace {

using Json = nlohmann::ordered_json;

const char* activation_name(ExpertActivation a) {
  switch (a) {
    case ExpertActivation::kRelu:
      return "relu";
    case ExpertActivation::kGelu:
      return "gelu";
    case ExpertActivation::kGeluTanh:
      return "gelu_tanh";
    case ExpertActivation::kSwiglu:
      return "swiglu";
  }
  return "?";
}

const char* residual_form_name(kernels::ResidualForm f) {
  switch (f) {
    case kernels::ResidualForm::kPlain:
      return "plain";
    case kernels::ResidualForm::kMomentum:
      return "momentum";
    case kernels::ResidualForm::kAdam:
      return "adam";
  }
  return "?";
}

// "blocks.3.attn.w_qkv" -> ("blocks.3.", "attn.w_qkv"); any other name -> ("", name).
std::pair<std::string, std::string> split_block(const std::string& name) {
  if (name.rfind("blocks.", 0) != 0) return {"", name};
  const size_t dot = name.find('.', 7);
  if (dot == std::string::npos) return {"", name};
  return {name.substr(0, dot + 1), name.substr(dot + 1)};
}

// function-length: table (one line per field)
Json moe_layer_json(const MoeLayerConfig& m) {
  Json j;
  j["type"] = "moe";
  j["num_experts"] = m.num_experts;
  j["top_k"] = m.sparsemixer.enabled ? 1 : m.top_k;
  j["d_expert"] = m.d_expert;
  j["activation"] = activation_name(m.activation);
  // Evaluation: 0 routes every token (nothing dropped); > 0 drops by this capacity factor, first
  // choices in token order first (kernels/moe_dispatch.h).
  j["eval_capacity_factor"] = m.dropless ? 0.0 : m.eval_capacity_factor;
  // Routing of current models: scores (softmax | sigmoid), top-k on the logits (softmax without
  // a bias) or on the scores plus `moe.score_bias` (loss-free balancing, when score_bias), inside
  // each token's best topk_groups of expert_groups groups (a group's score: the sum of its
  // group_top best choice keys); gates = the chosen scores, divided by
  // their sum when renormalize, times routed_scaling; shared experts: one FFN of width
  // shared_experts x d_shared added to the experts' output, times sigmoid(y . gate) when
  // shared_expert_gate (Qwen2-MoE; moe.shared.gate.weight [1, D]).
  j["score_function"] = m.score_function == ScoreFunction::kSigmoid ? "sigmoid" : "softmax";
  j["renormalize"] = m.renormalize;
  j["routed_scaling"] = m.routed_scaling;
  j["expert_groups"] = m.expert_groups;
  j["topk_groups"] = m.kept_groups();
  j["group_top"] = m.group_top();
  j["score_bias"] = m.bias_update_rate > 0;
  j["shared_experts"] = m.shared_experts;
  j["d_shared"] = m.d_shared > 0 ? m.d_shared : m.d_expert;  // shared_width() / shared_experts
  j["shared_expert_gate"] = m.shared_expert_gate;
  // The residual dynamics as momoe computes them, per element (kernels/cpu/residual_math.h),
  // with momoe's own coefficients (residual_args_for, input_shift_for), kept for other readers:
  //   plain:    out = x + u,                      p_out = p_in
  //   momentum: p_out = a_state p_in + a_input u, out = x + a_out p_out
  //   adam:     m = beta1 m_in + (1 - beta1) u,  v = beta2 v_in + (1 - beta2) u^2
  //             (m_in = v_in = 0),
  //             out = (1 - kappa) x + adam_sign gamma m / (sqrt(v) + eps)  [or sqrt(v + eps)],
  //             p_out = a_state p_in + a_input u
  // and input_shift: the router and experts see y = x + input_shift p_in (Robust MomentumSMoE).
  const kernels::ResidualArgs a = residual_args_for(m);
  Json r;
  r["form"] = residual_form_name(a.form);
  r["a_state"] = a.a_state;
  r["a_input"] = a.a_input;
  r["a_out"] = a.a_out;
  if (a.form == kernels::ResidualForm::kAdam) {
    r["beta1"] = a.beta1;
    r["beta2"] = a.beta2;
    r["eps"] = a.eps;
    r["eps_inside_sqrt"] = a.eps_inside_sqrt;
    r["kappa"] = a.kappa;
    r["gamma"] = a.gamma;
    r["adam_sign"] = a.adam_sign;
  }
  r["input_shift"] = input_shift_for(m);
  j["residual"] = r;
  // What the coefficients come from, as the papers write it (spec/momentum-smoe.md 2-4): the
  // module derives its coefficients from these alone and only cross-checks "residual" (momoe's
  // own mapping, the code under test) against them.
  //   heavy_ball: mu, gamma as configured (Eq. 10)
  //   adam:       mu, gamma of the heavy-ball state the layer hands on, and the Adam settings
  //   robust:     rho, lipschitz (L), strong_convexity (m) as configured; mu, gamma and alpha
  //               are momoe's values by Eq. 17 (recorded for people and cross-checked)
  Json paper;
  paper["kind"] = residual_kind_name(m.residual);
  paper["convention"] = m.convention == MomentumConvention::kPaper ? "paper" : "reference_code";
  if (m.residual != ResidualKind::kPlain) {
    paper["mu"] = m.effective_mu();
    paper["gamma"] = m.effective_gamma();
  }
  if (m.residual == ResidualKind::kAdam) {
    Json adam;
    adam["beta1"] = m.adam.beta1;
    adam["beta2"] = m.adam.beta2;
    adam["eps"] = m.adam.eps;
    adam["eps_placement"] =
        m.adam.eps_placement == AdamEpsPlacement::kInsideSqrt ? "inside_sqrt" : "outside_sqrt";
    adam["kappa"] = m.adam.kappa;
    adam["gamma"] = m.adam.gamma;
    paper["adam"] = adam;
  }
  if (m.residual == ResidualKind::kRobust) {
    paper["rho"] = m.robust.rho;
    paper["lipschitz"] = m.robust.lipschitz;
    paper["strong_convexity"] = m.robust.strong_convexity;
    paper["alpha"] = m.robust.alpha();
  }
  j["dynamics"] = paper;
  Json ac;
  ac["enabled"] = m.ac.enabled;
  if (m.ac.enabled) {
    ac["normalization"] =
        m.ac.normalization == AcNormalization::kPaper ? "paper" : "reference_code";
    ac["eps"] = m.ac.eps;
    ac["clip_mult"] = m.ac.clip_mult;
    ac["min_cluster_size"] = m.ac.min_cluster_size;
    // "unit_norm_embeddings": logits = r W_n, the router weight's rows (exported [E, D]) at unit
    // L2 norm, and no bias (router.bias is exported but unused).
    ac["logits"] = m.ac.logits == AcLogits::kLinear ? "linear" : "unit_norm_embeddings";
  }
  j["ac_router"] = ac;
  Json sm;
  sm["enabled"] = m.sparsemixer.enabled;
  if (m.sparsemixer.enabled) {
    sm["jitter"] = m.sparsemixer.jitter;
    sm["mask"] = m.sparsemixer.mask == SparseMixerMask::kPaper ? "paper" : "reference_code";
    sm["omega"] = m.sparsemixer.omega;
  }
  j["sparsemixer"] = sm;
  // Training-only settings, recorded so the model's provenance is complete.
  Json training;
  training["capacity_factor"] = m.capacity_factor;
  training["dropless"] = m.dropless;
  training["balance_loss_coef"] = m.balance_loss_coef;
  training["z_loss_coef"] = m.z_loss_coef;
  training["seq_balance_loss_coef"] = m.seq_balance_loss_coef;
  training["bias_update_rate"] = m.bias_update_rate;
  training["max_ep_ranks"] = m.max_ep_ranks;
  training["expert_dropout"] = m.expert_dropout;
  training["output_dropout"] = m.output_dropout;
  j["training"] = training;
  return j;
}

// [rows, cols] -> [cols, rows] (host, any floating dtype of the master weights).
template <typename T>
void transpose_into(const T* src, int64_t rows, int64_t cols, T* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }
}

// One exported tensor: `src` (host, [rows, cols] when transposed) copied or transposed.
Tensor export_tensor(const TensorView& src, Shape shape, bool transpose) {
  Tensor out = Tensor::empty(transpose ? Shape{shape[1], shape[0]} : shape, src.dtype());
  const int64_t bytes = src.numel() * static_cast<int64_t>(dtype_size(src.dtype()));
  if (!transpose) {
    std::memcpy(out.view().raw(), src.raw(), static_cast<size_t>(bytes));
  } else if (src.dtype() == DType::kF64) {
    transpose_into(src.data<double>(), shape[0], shape[1], out.data<double>());
  } else {
    transpose_into(src.data<float>(), shape[0], shape[1], out.data<float>());
  }
  return out;
}

}  // namespace

StatusOr<ExportedName> exported_name(const std::string& name) {
  static const std::map<std::string, ExportedName> kTopLevel = {
      {"embed.tokens", {"embed_tokens.weight", false}},
      {"embed.positions", {"embed_positions.weight", false}},
      {"final_ln.gamma", {"final_ln.weight", false}},
      {"final_ln.beta", {"final_ln.bias", false}},
      {"head.weight", {"head.weight", false}},
  };
  static const std::map<std::string, ExportedName> kInBlock = {
      {"attn.w_qkv", {"attn.qkv.weight", true}},
      {"attn.b_qkv", {"attn.qkv.bias", false}},
      {"attn.w_o", {"attn.out.weight", true}},
      {"attn.b_o", {"attn.out.bias", false}},
      {"attn.q_norm.gamma", {"attn.q_norm.weight", false}},
      {"attn.k_norm.gamma", {"attn.k_norm.weight", false}},
      {"ln1.gamma", {"ln1.weight", false}},
      {"ln1.beta", {"ln1.bias", false}},
      {"ln2.gamma", {"ln2.weight", false}},
      {"ln2.beta", {"ln2.bias", false}},
      {"ln_in.gamma", {"ln_in.weight", false}},
      {"ln_in.beta", {"ln_in.bias", false}},
      {"ffn.w1", {"ffn.fc1.weight", true}},
      {"ffn.b1", {"ffn.fc1.bias", false}},
      {"ffn.w2", {"ffn.fc2.weight", true}},
      {"ffn.b2", {"ffn.fc2.bias", false}},
      {"moe.w_router", {"moe.router.weight", true}},
      {"moe.b_router", {"moe.router.bias", false}},
      {"moe.omega", {"moe.omega", false}},
      {"moe.score_bias", {"moe.score_bias", false}},
      {"moe.shared.w1", {"moe.shared.fc1.weight", true}},
      {"moe.shared.b1", {"moe.shared.fc1.bias", false}},
      {"moe.shared.w2", {"moe.shared.fc2.weight", true}},
      {"moe.shared.b2", {"moe.shared.fc2.bias", false}},
      {"moe.shared.w_gate", {"moe.shared.gate.weight", true}},
  };
  const auto [block, leaf] = split_block(name);
  const auto& table = block.empty() ? kTopLevel : kInBlock;
  const auto it = table.find(leaf);
  if (it == table.end()) {
    return internal_error("momoe-export does not know parameter ", name,
                          ": it would be left out of the export");
  }
  return ExportedName{block + it->second.name, it->second.transpose};
}

std::string export_config_json(const ModelConfig& model, const ExportSource& source) {
  Json j;
  j["format"] = "momoe-export";
  j["format_version"] = 1;
  j["architecture"] = "MomoeLM";
  j["vocab_size"] = model.vocab_size;
  j["d_model"] = model.d_model;
  j["n_heads"] = model.n_heads;
  j["seq_len"] = model.seq_len;
  j["d_ff"] = model.d_ff;
  j["activation"] = activation_name(model.activation);
  j["block_style"] = model.block_style == BlockStyle::kPreLn ? "pre_ln" : "post_ln_double_residual";
  j["tie_embeddings"] = model.tie_embeddings;
  j["norm"] = model.norm == NormKind::kRmsNorm ? "rms_norm" : "layer_norm";
  j["norm_eps"] = model.norm_eps;
  j["layer_norm_eps"] = model.norm_eps;  // the name of format 1's first exports
  j["position"] = model.position == PositionKind::kRope ? "rope" : "learned";
  j["rope_base"] = model.rope_base;
  j["linear_bias"] = model.linear_bias;
  j["qk_norm"] = model.qk_norm;  // RMSNorm over each head's q and k before RoPE (norm_eps)
  j["dtype"] = "float32";
  Json blocks = Json::array();
  for (const BlockPlan& b : model.blocks) {
    if (b.moe) {
      blocks.push_back(moe_layer_json(b.moe_cfg));
    } else {
      blocks.push_back(Json{{"type", "dense"}});
    }
  }
  j["blocks"] = blocks;
  j["arch"] = model.arch;
  j["dropout"] = model.dropout;
  j["attention_dropout"] = model.attention_dropout;
  // An AC router's metric comes from the statistics of the batch it routes, so perplexity matches
  // momoe-eval's when the text is evaluated in batches of this many sequences (the last one
  // padded with copies of the first sequence, whose targets are ignored).
  j["eval_batch_size"] = source.eval_batch;
  Json tok;
  tok["kind"] = source.tokenizer_kind;
  tok["size"] = source.vocab_size;
  tok["fingerprint"] = io::hex64(source.vocab_fingerprint);
  tok["files"] = source.tokenizer_files;
  j["tokenizer"] = tok;
  Json src;
  src["checkpoint"] = source.checkpoint;
  src["step"] = source.step;
  src["run_id"] = source.run_id;
  src["branch"] = source.branch;
  src["config"] = source.config_text;
  j["source"] = src;
  return j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

Status export_model(TransformerLM* model, const ExportSource& source, const std::string& out_dir) {
  Context& ctx = model->context();
  ckpt::SafetensorsWriter writer;
  std::vector<Tensor> keep;  // the writer holds views
  for (const auto& p : model->params().all()) {
    if (p->kind == ParamKind::kExpert && p->shape[0] != p->global_experts) {
      return internal_error("momoe-export: ", p->name, " holds experts [", p->first_expert, ", ",
                            p->first_expert + p->shape[0], ") of ", p->global_experts,
                            ": build the model without an EP group");
    }
    MOE_ASSIGN_OR_RETURN(Tensor host, ctx.read_back(p->master));
    if (p->kind == ParamKind::kExpert) {
      // blocks.i.moe.{w1,b1,w2,b2} [E, ...] -> blocks.i.moe.experts.e.fc{1,2}.{weight,bias}.
      const auto [block, leaf] = split_block(p->name);
      const bool matrix = p->shape.ndim() == 3;
      const char* layer = leaf == "moe.w1" || leaf == "moe.b1" ? "fc1" : "fc2";
      if (block.empty() ||
          (leaf != "moe.w1" && leaf != "moe.b1" && leaf != "moe.w2" && leaf != "moe.b2")) {
        return internal_error("momoe-export does not know expert parameter ", p->name);
      }
      const int64_t per_expert = p->numel() / p->shape[0];
      for (int64_t e = 0; e < p->shape[0]; ++e) {
        const TensorView one =
            host.view().reshape({host.numel()}).rows(e * per_expert, (e + 1) * per_expert);
        keep.push_back(matrix ? export_tensor(one, Shape{p->shape[1], p->shape[2]}, true)
                              : export_tensor(one, Shape{p->shape[1]}, false));
        writer.add(str_cat(block, "moe.experts.", e, ".", layer, matrix ? ".weight" : ".bias"),
                   keep.back().view());
      }
      continue;
    }
    MOE_ASSIGN_OR_RETURN(const ExportedName out, exported_name(p->name));
    keep.push_back(export_tensor(host.view(), p->shape, out.transpose));
    writer.add(out.name, keep.back().view());
  }
  writer.set_metadata("format", "pt");  // what transformers' loaders look for
  writer.set_metadata("momoe.checkpoint", source.checkpoint);
  writer.set_metadata("momoe.step", std::to_string(source.step));
  MOE_RETURN_IF_ERROR(writer.write(out_dir + "/model.safetensors"));
  return io::write_file_atomic(out_dir + "/config.json",
                               export_config_json(model->config(), source));
}

}  // namespace moe
