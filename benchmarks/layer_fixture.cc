#include "benchmarks/layer_fixture.h"

#include <cmath>

#include "core/base/rng.h"
#include "core/layers/init.h"

namespace moe::bench {

const char* variant_name(LayerVariant v) {
  switch (v) {
    case LayerVariant::kPlain: return "plain";
    case LayerVariant::kMomentum: return "momentum";
    case LayerVariant::kAc: return "ac";
    case LayerVariant::kSparseMixer: return "sparsemixer";
  }
  return "?";
}

StatusOr<LayerVariant> parse_variant(const std::string& name) {
  for (LayerVariant v : {LayerVariant::kPlain, LayerVariant::kMomentum, LayerVariant::kAc,
                         LayerVariant::kSparseMixer}) {
    if (name == variant_name(v)) return v;
  }
  return invalid_argument_error("variant '", name, "' is not plain, momentum, ac or sparsemixer");
}

MoeLayerConfig layer_config(int64_t d, int64_t f, int64_t experts, int64_t top_k, LayerVariant v) {
  MoeLayerConfig cfg;
  cfg.d_model = d;
  cfg.d_expert = f;
  cfg.num_experts = experts;
  cfg.top_k = v == LayerVariant::kSparseMixer ? 1 : top_k;
  cfg.capacity_factor = 1.25;
  cfg.residual = v == LayerVariant::kMomentum ? ResidualKind::kHeavyBall : ResidualKind::kPlain;
  cfg.ac.enabled = v == LayerVariant::kAc;
  cfg.sparsemixer.enabled = v == LayerVariant::kSparseMixer;
  return cfg;
}

LayerFixture::LayerFixture(const MoeLayerConfig& cfg, int64_t tokens, comm::Communicator* comm,
                           int rank)
    : cfg_(cfg), token_offset_(rank * tokens), params_(DType::kF32) {
  layer_ = std::make_unique<MoeLayer>("moe", cfg, 1, 1, &params_, comm);
  // N(0, 0.05^2) weights, one stream per parameter; expert shards draw their slice of the global
  // tensor, so every EP layout holds the same weights.
  uint64_t param_stream = 0;
  for (const auto& p : params_.all()) {
    ++param_stream;
    if (p->name.find("omega") != std::string::npos) continue;  // stays at 1
    const uint64_t first =
        p->kind == ParamKind::kExpert
            ? static_cast<uint64_t>(p->first_expert * (p->value.numel() / p->value.dim(0)))
            : 0;
    const CounterRng rng{1, make_stream(RngTag::kTest, 1, param_stream)};
    MOE_CHECK(init_normal(p->value, 0.05, rng, first).ok());
  }
  const int64_t d = cfg.d_model;
  uint64_t stream = 100 + static_cast<uint64_t>(rank) * 4;
  auto randn = [&](Shape s) {
    Tensor t = Tensor::empty(s, DType::kF32);
    MOE_CHECK(init_normal(t, 1.0, CounterRng{2, make_stream(RngTag::kTest, 2, stream++)}).ok());
    return t;
  };
  x_ = randn({tokens, d});
  p_ = randn({tokens, d});
  d_out_ = randn({tokens, d});
  out_ = Tensor::empty({tokens, d}, DType::kF32);
  p_out_ = Tensor::empty({tokens, d}, DType::kF32);
  d_x_ = Tensor::empty({tokens, d}, DType::kF32);
  d_base_ = Tensor::empty({tokens, d}, DType::kF32);
  d_p_ = Tensor::empty({tokens, d}, DType::kF32);
  prev_top1_ = Tensor::empty({tokens}, DType::kI32);
  for (int64_t t = 0; t < tokens; ++t) {
    prev_top1_.data<int32_t>()[t] = static_cast<int32_t>(t % cfg.num_experts);
  }
}

Status LayerFixture::forward(MoeLayerSaved* saved) {
  MoeLayerInputs in;
  in.x_in = x_;
  in.x_base = x_;
  in.p_in = p_;
  in.prev_top1 = prev_top1_;
  in.token_offset = token_offset_;
  MoeLayerOutputs o;
  o.out = out_;
  o.p_out = p_out_;
  return layer_->forward(in, o, saved, nullptr);
}

Status LayerFixture::backward(const MoeLayerSaved& saved) {
  MoeLayerGradOutputs g;
  g.d_out = d_out_;
  MoeLayerGradInputs gi{d_x_, d_base_, d_p_, {}, {}};
  return layer_->backward(g, saved, gi);
}

Status LayerFixture::forward_backward() {
  MoeLayerSaved saved;
  MOE_RETURN_IF_ERROR(forward(&saved));
  return backward(saved);
}

bool LayerFixture::outputs_finite() const {
  for (int64_t i = 0; i < out_.numel(); ++i) {
    if (!std::isfinite(out_.data<float>()[i]) || !std::isfinite(d_x_.data<float>()[i])) return false;
  }
  return true;
}

}  // namespace moe::bench
