// CPU MoE layer forward and forward+backward throughput (Google Benchmark).
//
// FLOP model (DESIGN.md "Performance model"), per token, forward:
//   experts: K * (2 * D * F) multiply-adds = K * 4 * D * F FLOPs
//   router:  D * E multiply-adds           = 2 * D * E FLOPs
// i.e. flops_fwd = 2 * K * (2 * D * F) + 2 * D * E, and forward + backward = 3 * flops_fwd.
// Reported: tokens/s and GFLOP/s against that count (padding rows and the residual dynamics are
// not counted as useful work). Before timing, every configuration checks that a forward pass
// produced finite outputs (a correctness pre-check; the exact checks live in tests/).
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>

#include "core/layers/moe_layer.h"
#include "core/base/rng.h"

namespace moe {
namespace {

enum Variant { kPlain = 0, kMomentum = 1, kAc = 2, kSparseMixer = 3 };
const char* variant_name(int v) {
  switch (v) {
    case kPlain: return "plain";
    case kMomentum: return "momentum";
    case kAc: return "ac";
    case kSparseMixer: return "sparsemixer";
  }
  return "?";
}

struct Setup {
  MoeLayerConfig cfg;
  std::unique_ptr<ParameterSet> params;
  std::unique_ptr<MoeLayer> layer;
  Tensor x, p, out, p_out, top1, prev_top1, d_out, d_x, d_base, d_p;

  Setup(int64_t tokens, int64_t d, int64_t f, int64_t e, int64_t k, int variant) {
    cfg.d_model = d;
    cfg.d_expert = f;
    cfg.num_experts = e;
    cfg.top_k = variant == kSparseMixer ? 1 : k;
    cfg.capacity_factor = 1.25;
    cfg.residual = variant == kMomentum ? ResidualKind::kHeavyBall : ResidualKind::kPlain;
    cfg.ac.enabled = variant == kAc;
    cfg.sparsemixer.enabled = variant == kSparseMixer;
    MOE_CHECK(cfg.validate().ok());
    params = std::make_unique<ParameterSet>(DType::kF32);
    layer = std::make_unique<MoeLayer>("moe", cfg, 1, 1, params.get(), nullptr);
    CounterRng rng{1, make_stream(RngTag::kTest, 0, 0)};
    uint64_t idx = 0;
    for (const auto& prm : params->all()) {
      if (prm->name.find("omega") != std::string::npos) continue;
      for (int64_t i = 0; i < prm->value.numel(); ++i)
        prm->value.data<float>()[i] = 0.05f * rng.normal(idx++);
    }
    auto randn = [&](Shape s) {
      Tensor t = Tensor::empty(s, DType::kF32);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.normal(idx++);
      return t;
    };
    x = randn({tokens, d});
    p = randn({tokens, d});
    d_out = randn({tokens, d});
    out = Tensor::empty({tokens, d}, DType::kF32);
    p_out = Tensor::empty({tokens, d}, DType::kF32);
    d_x = Tensor::empty({tokens, d}, DType::kF32);
    d_base = Tensor::empty({tokens, d}, DType::kF32);
    d_p = Tensor::empty({tokens, d}, DType::kF32);
    top1 = Tensor::empty({tokens}, DType::kI32);
    prev_top1 = Tensor::empty({tokens}, DType::kI32);
    for (int64_t t = 0; t < tokens; ++t) prev_top1.data<int32_t>()[t] = static_cast<int32_t>(t % e);
  }

  MoeLayerInputs inputs() const {
    MoeLayerInputs in;
    in.x_in = x;
    in.x_base = x;
    in.p_in = p;
    in.prev_top1 = prev_top1;
    return in;
  }

  void forward(MoeLayerSaved* saved) {
    MoeLayerOutputs o{out, p_out, {}, {}, top1};
    Status s = layer->forward(inputs(), o, saved, nullptr);
    MOE_CHECK(s.ok(), s.to_string());
  }

  void backward(const MoeLayerSaved& saved) {
    MoeLayerGradOutputs g;
    g.d_out = d_out;
    MoeLayerGradInputs gi{d_x, d_base, d_p, {}, {}};
    Status s = layer->backward(g, saved, gi);
    MOE_CHECK(s.ok(), s.to_string());
  }
};

double flops_forward(int64_t tokens, int64_t d, int64_t f, int64_t e, int64_t k) {
  return static_cast<double>(tokens) * (2.0 * k * (2.0 * d * f) + 2.0 * d * e);
}

void run(benchmark::State& state, bool with_backward) {
  const int64_t tokens = state.range(0), d = state.range(1), f = state.range(2),
                e = state.range(3), k = state.range(4);
  const int variant = static_cast<int>(state.range(5));
  Setup setup(tokens, d, f, e, k, variant);
  {
    MoeLayerSaved saved;
    setup.forward(&saved);
    for (int64_t i = 0; i < setup.out.numel(); ++i) {
      if (!std::isfinite(setup.out.data<float>()[i])) {
        state.SkipWithError("check failed: non-finite output");
        return;
      }
    }
  }
  for (auto _ : state) {
    MoeLayerSaved saved;
    setup.forward(&saved);
    if (with_backward) setup.backward(saved);
    benchmark::DoNotOptimize(setup.out.raw());
  }
  const double flops = flops_forward(tokens, d, f, e, setup.cfg.top_k) * (with_backward ? 3 : 1);
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(variant_name(variant));
}

void BM_MoeLayerForward(benchmark::State& state) { run(state, false); }
void BM_MoeLayerForwardBackward(benchmark::State& state) { run(state, true); }

// T, D, F, E, K, variant. The second shape is SMoE-medium's layer (D = F = 352, 16 experts).
void shapes(benchmark::internal::Benchmark* b) {
  for (int v : {kPlain, kMomentum, kAc, kSparseMixer}) b->Args({1024, 128, 256, 8, 2, v});
  for (int v : {kPlain, kMomentum, kAc, kSparseMixer}) b->Args({2048, 352, 352, 16, 2, v});
  b->ArgNames({"T", "D", "F", "E", "K", "variant"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_MoeLayerForward)->Apply(shapes);
BENCHMARK(BM_MoeLayerForwardBackward)->Apply(shapes);

}  // namespace
}  // namespace moe

BENCHMARK_MAIN();
