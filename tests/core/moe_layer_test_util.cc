#include "tests/core/moe_layer_test_util.h"

#include <gtest/gtest.h>

namespace moe::testing {

MoeLayerConfig small_config() {
  MoeLayerConfig cfg;
  cfg.d_model = 4;
  cfg.d_expert = 5;
  cfg.num_experts = 4;
  cfg.top_k = 2;
  cfg.capacity_factor = 4.0;  // nothing dropped unless a test lowers it
  cfg.activation = ExpertActivation::kGelu;
  cfg.balance_loss_coef = 0.05;
  cfg.z_loss_coef = 0.01;
  return cfg;
}

double aux_loss(const MoeLayerSaved& saved) { return saved.aux.data<double>()[2]; }

Tensor or_zeros(const Tensor& t, int64_t rows, int64_t cols) {
  return t.numel() > 0 ? t : Tensor::zeros({rows, cols}, DType::kF64);
}

LayerHarness::LayerHarness(const MoeLayerConfig& config, int64_t num_tokens, uint64_t fill_seed,
                           comm::Communicator* comm)
    : cfg(config), tokens(num_tokens), ep_comm(comm) {
  ctx = Context::host();
  params = std::make_unique<ParameterSet>(ctx.get(), DType::kF64);
  layer = std::make_unique<MoeLayer>("moe", cfg, /*block=*/2, /*moe_index=*/1, params.get(), comm);
  EXPECT_TRUE(params->allocate().ok());
  uint64_t s = fill_seed;
  for (const auto& p : params->all()) {
    if (p->name.find("omega") != std::string::npos) {
      fill_uniform(p->master, ++s, 0.5, 1.5);
    } else if (p->kind == ParamKind::kExpert) {
      // Every rank draws the global tensor and keeps its shard, so layouts agree.
      const int64_t per_expert = p->numel() / p->shape[0];
      Tensor global = Tensor::empty({p->global_experts * per_expert}, DType::kF64);
      fill_uniform(global, ++s, -0.8, 0.8);
      std::copy_n(global.data<double>() + p->first_expert * per_expert, p->numel(),
                  p->master.data<double>());
    } else {
      fill_uniform(p->master, ++s, -0.8, 0.8);
    }
  }
  const int64_t d = cfg.d_model;
  x = Tensor::empty({tokens, d}, DType::kF64);
  x_base = Tensor::empty({tokens, d}, DType::kF64);
  p_in = Tensor::empty({tokens, d}, DType::kF64);
  m_in = Tensor::empty({tokens, d}, DType::kF64);
  v_in = Tensor::empty({tokens, d}, DType::kF64);
  w_out = Tensor::empty({tokens, d}, DType::kF64);
  w_p = Tensor::empty({tokens, d}, DType::kF64);
  w_m = Tensor::empty({tokens, d}, DType::kF64);
  w_v = Tensor::empty({tokens, d}, DType::kF64);
  fill_uniform(x, fill_seed + 100, -1.5, 1.5);
  fill_uniform(x_base, fill_seed + 101, -1.0, 1.0);
  fill_uniform(p_in, fill_seed + 102, -0.5, 0.5);
  fill_uniform(m_in, fill_seed + 103, -0.2, 0.2);
  fill_uniform(v_in, fill_seed + 104, 0.05, 0.3);
  fill_uniform(w_out, fill_seed + 105);
  fill_uniform(w_p, fill_seed + 106);
  fill_uniform(w_m, fill_seed + 107);
  fill_uniform(w_v, fill_seed + 108);
  prev_top1 = Tensor::empty({tokens}, DType::kI32);
  for (int64_t t = 0; t < tokens; ++t) {
    prev_top1.data<int32_t>()[t] = static_cast<int32_t>((t * 7 + 3) % cfg.num_experts);
  }
}

double LayerHarness::forward(MoeLayerSaved* saved, RouterStatsInfo* stats, Tensor* out_copy,
                             Tensor* p_out_copy, Tensor* top1_copy) {
  const int64_t d = cfg.d_model;
  const RouterStatsLayout layout(cfg.num_experts);
  Tensor block = Tensor::zeros({layout.size()}, DType::kF64);
  MoeLayerInputs in;
  in.x_in = x;
  in.x_base = separate_base ? x_base : x;
  if (with_state) in.p_in = p_in;
  if (with_adam_state) {
    in.adam_m_in = m_in;
    in.adam_v_in = v_in;
  }
  in.prev_top1 = prev_top1;
  in.token_offset = token_offset;
  in.seq_len = seq_len;
  in.stats_comm = stats_comm;
  in.step = step;
  in.seed = seed;
  in.training = training;
  if (stats != nullptr) in.stats = block;
  StatusOr<MoeLayerOutputs> o = layer->forward(in, saved);
  EXPECT_TRUE(o.ok()) << o.status().to_string();
  if (!o.ok()) return 0;
  if (stats != nullptr) {
    *stats = RouterStatsInfo();
    layout.read(block.data<double>(), stats);
    stats->block = layer->block();
    stats->moe_index = layer->moe_index();
  }
  double loss = dot(o->out, w_out) + dot(o->p_out, w_p) + dot(o->adam_m_out, w_m) +
                dot(o->adam_v_out, w_v) + aux_scale * aux_loss(*saved);
  if (out_copy != nullptr) *out_copy = o->out;
  if (p_out_copy != nullptr) *p_out_copy = o->p_out;
  if (top1_copy != nullptr) *top1_copy = o->top1;
  (void)d;
  return loss;
}

void LayerHarness::backward(Tensor* d_x, Tensor* d_x_base, Tensor* d_p_in, Tensor* d_m_in,
                            Tensor* d_v_in) {
  const int64_t d = cfg.d_model;
  MoeLayerSaved saved;
  forward(&saved);
  ASSERT_TRUE(params->zero_grads().ok());
  MoeLayerGradOutputs g{w_out, w_p, w_m, w_v, aux_scale};
  StatusOr<MoeLayerGradInputs> gi = layer->backward(g, saved);
  ASSERT_TRUE(gi.ok()) << gi.status().to_string();
  // Copies: the caller may modify them.
  *d_x = Tensor::copy_of(gi->d_x_in);
  *d_x_base = Tensor::copy_of(gi->d_x_base);
  *d_p_in = Tensor::copy_of(gi->d_p_in);
  *d_m_in = Tensor::copy_of(or_zeros(gi->d_adam_m_in, tokens, d));
  *d_v_in = Tensor::copy_of(or_zeros(gi->d_adam_v_in, tokens, d));
  if (!separate_base) {
    // Post-LN style: x feeds both the router/experts and the residual base.
    for (int64_t i = 0; i < d_x->numel(); ++i)
      d_x->data<double>()[i] += d_x_base->data<double>()[i];
  }
}

std::vector<GradTarget> LayerHarness::param_targets(const std::vector<std::string>& skip) {
  std::vector<GradTarget> targets;
  for (const auto& p : params->all()) {
    bool skipped = false;
    for (const std::string& s : skip) skipped |= p->name.find(s) != std::string::npos;
    if (!skipped) targets.push_back({p->name, p->master, p->grad});
  }
  return targets;
}

}  // namespace moe::testing
