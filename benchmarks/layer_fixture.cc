#include "benchmarks/layer_fixture.h"

#include <cmath>

#include "base/rng.h"
#include "kernels/elementwise.h"
#include "kernels/init.h"

namespace moe::bench {

const char* variant_name(LayerVariant v) {
  switch (v) {
    case LayerVariant::kPlain:
      return "plain";
    case LayerVariant::kMomentum:
      return "momentum";
    case LayerVariant::kAdam:
      return "adam";
    case LayerVariant::kRobust:
      return "robust";
    case LayerVariant::kAc:
      return "ac";
    case LayerVariant::kSparseMixer:
      return "sparsemixer";
  }
  return "?";
}

StatusOr<LayerVariant> parse_variant(const std::string& name) {
  for (LayerVariant v : {LayerVariant::kPlain, LayerVariant::kMomentum, LayerVariant::kAdam,
                         LayerVariant::kRobust, LayerVariant::kAc, LayerVariant::kSparseMixer}) {
    if (name == variant_name(v)) return v;
  }
  return invalid_argument_error("variant '", name,
                                "' is not plain, momentum, adam, robust, ac or sparsemixer");
}

MoeLayerConfig layer_config(int64_t d, int64_t f, int64_t experts, int64_t top_k, LayerVariant v) {
  MoeLayerConfig cfg;
  cfg.d_model = d;
  cfg.d_expert = f;
  cfg.num_experts = experts;
  cfg.top_k = v == LayerVariant::kSparseMixer ? 1 : top_k;
  cfg.capacity_factor = 1.25;
  cfg.residual = v == LayerVariant::kMomentum ? ResidualKind::kHeavyBall
                 : v == LayerVariant::kAdam   ? ResidualKind::kAdam
                 : v == LayerVariant::kRobust ? ResidualKind::kRobust
                                              : ResidualKind::kPlain;
  cfg.ac.enabled = v == LayerVariant::kAc;
  cfg.sparsemixer.enabled = v == LayerVariant::kSparseMixer;
  return cfg;
}

std::unique_ptr<Context> make_bench_context(int threads, int cuda_device) {
  ContextOptions o;
  o.threads = threads;
  if (cuda_device < 0) return Context::host(o);
  StatusOr<std::unique_ptr<Context>> ctx = Context::cuda(cuda_device, o);
  MOE_CHECK(ctx.ok(), ctx.status().to_string());
  return std::move(*ctx);
}

LayerFixture::LayerFixture(const MoeLayerConfig& cfg, int64_t tokens, comm::Communicator* comm,
                           int rank, DType act, int threads, int cuda_device)
    : cfg_(cfg),
      token_offset_(rank * tokens),
      ctx_(make_bench_context(threads, cuda_device)),
      params_(ctx_.get(), act) {
  layer_ = std::make_unique<MoeLayer>("moe", cfg, 1, 1, &params_, comm);
  MOE_CHECK(params_.allocate().ok());
  // N(0, 0.05^2) weights, one stream per parameter; expert shards draw their slice of the global
  // tensor, so every EP layout holds the same weights.
  uint64_t param_stream = 0;
  for (const auto& p : params_.all()) {
    ++param_stream;
    if (p->name.find("omega") != std::string::npos) {
      MOE_CHECK(kernels::init_constant(*ctx_, p->master, 1.0).ok());
      continue;
    }
    if (p->name.find("score_bias") != std::string::npos) {
      // Loss-free balancing's bias starts at zero, as in training: the same routing as without.
      MOE_CHECK(kernels::init_constant(*ctx_, p->master, 0.0).ok());
      continue;
    }
    const uint64_t first = p->kind == ParamKind::kExpert
                               ? static_cast<uint64_t>(p->first_expert * (p->numel() / p->shape[0]))
                               : 0;
    const CounterRng rng{1, make_stream(RngTag::kTest, 1, param_stream)};
    MOE_CHECK(kernels::init_normal(*ctx_, p->master, 0.05, rng, first).ok());
  }
  MOE_CHECK(params_.refresh_working().ok());
  const int64_t d = cfg.d_model;
  uint64_t stream = 100 + static_cast<uint64_t>(rank) * 4;
  auto randn = [&](Shape s, DType dtype) {
    Tensor t = ctx_->empty(s, dtype).value();
    MOE_CHECK(
        kernels::init_normal(*ctx_, t, 1.0, CounterRng{2, make_stream(RngTag::kTest, 2, stream++)})
            .ok());
    return t;
  };
  x_ = randn({tokens, d}, act);
  p_ = randn({tokens, d}, compute_dtype(act));
  d_out_ = randn({tokens, d}, act);
  Tensor top1 = Tensor::empty({tokens}, DType::kI32);
  for (int64_t t = 0; t < tokens; ++t) {
    top1.data<int32_t>()[t] = static_cast<int32_t>(t % cfg.num_experts);
  }
  prev_top1_ = ctx_->upload(top1).value();
  if (cfg.residual == ResidualKind::kAdam) {
    // Moments arriving from an earlier layer, as in every AdamSMoE layer but the first (empty
    // ones read as zeros and skip their loads): m ~ N(0, 1), v = 1.
    adam_m_ = randn({tokens, d}, compute_dtype(act));
    adam_v_ = ctx_->empty({tokens, d}, compute_dtype(act)).value();
    MOE_CHECK(kernels::init_constant(*ctx_, adam_v_, 1.0).ok());
  }
}

Status LayerFixture::forward(MoeLayerSaved* saved) {
  MoeLayerInputs in;
  in.x_in = x_;
  in.x_base = x_;
  in.p_in = p_;
  in.adam_m_in = adam_m_;
  in.adam_v_in = adam_v_;
  in.prev_top1 = prev_top1_;
  in.token_offset = token_offset_;
  MOE_ASSIGN_OR_RETURN(MoeLayerOutputs out, layer_->forward(in, saved));
  out_ = out.out;
  return Status::OK();
}

Status LayerFixture::backward(const MoeLayerSaved& saved) {
  MoeLayerGradOutputs g;
  g.d_out = d_out_;
  MOE_ASSIGN_OR_RETURN(MoeLayerGradInputs gi, layer_->backward(g, saved));
  d_x_ = gi.d_x_in;
  return Status::OK();
}

Status LayerFixture::forward_backward() {
  MoeLayerSaved saved;
  MOE_RETURN_IF_ERROR(forward(&saved));
  MOE_RETURN_IF_ERROR(backward(saved));
  // A training step's end: loss-free balancing moves its bias (a no-op without one).
  return layer_->update_score_bias(true);
}

StatusOr<bool> LayerFixture::outputs_finite() {
  MOE_ASSIGN_OR_RETURN(Tensor bad, ctx_->zeros({1}, DType::kF64));
  MOE_RETURN_IF_ERROR(kernels::count_nonfinite(*ctx_, out_, bad));
  MOE_RETURN_IF_ERROR(kernels::count_nonfinite(*ctx_, d_x_, bad));
  MOE_ASSIGN_OR_RETURN(Tensor host, ctx_->read_back(bad));
  return host.data<double>()[0] == 0;
}

}  // namespace moe::bench
