// momoe-bench layer: the MoE layer forward + backward on the CPU against the DESIGN.md
// performance model, with the floor measured in the same run:
//   flops = 3 * T * (2 K (2 D F) + 2 D E)       (forward + backward; padding not counted)
//   floor = a dense single GEMM of shape [T*K, D] x [D, F] timed here (the machine's GEMM rate)
//   roofline_ratio = layer GFLOP/s / dense GEMM GFLOP/s
// (The GPU version of this benchmark, against PyTorch's grouped GEMM, belongs to the CUDA
// backend.) A finiteness pre-check runs before timing.
//
//   momoe-bench layer [--tokens 2048] [--d 352] [--f 352] [--experts 16] [--top-k 2]
//                     [--variant plain|momentum|ac|sparsemixer] [--iterations 5] [--warmup 1]
#include <cmath>
#include <cstdio>

#include "benchmarks/bench_util.h"
#include "core/base/rng.h"
#include "core/layers/moe_layer.h"
#include "kernels/gemm.h"
#include "launcher/world.h"

namespace moe::bench {

Status bench_layer(int argc, char** argv, World* world) {
  MOE_ASSIGN_OR_RETURN(Args a, Args::parse(argc, argv, {"tokens", "d", "f", "experts", "top-k",
                                                        "variant", "iterations", "warmup"}));
  if (world->size() != 1) return invalid_argument_error("momoe-bench layer runs on one rank");
  const std::string variant = a.get_str("variant", "plain");
  MoeLayerConfig cfg;
  cfg.d_model = a.get("d", 352);
  cfg.d_expert = a.get("f", 352);
  cfg.num_experts = a.get("experts", 16);
  cfg.top_k = variant == "sparsemixer" ? 1 : a.get("top-k", 2);
  cfg.capacity_factor = 1.25;
  cfg.residual = variant == "momentum" ? ResidualKind::kHeavyBall : ResidualKind::kPlain;
  cfg.ac.enabled = variant == "ac";
  cfg.sparsemixer.enabled = variant == "sparsemixer";
  if (variant != "plain" && variant != "momentum" && variant != "ac" && variant != "sparsemixer") {
    return invalid_argument_error("--variant must be plain, momentum, ac or sparsemixer");
  }
  MOE_RETURN_IF_ERROR(cfg.validate("bench"));
  const int64_t tokens = a.get("tokens", 2048), d = cfg.d_model, f = cfg.d_expert;
  ParameterSet params(DType::kF32);
  MoeLayer layer("moe", cfg, 1, 1, &params, nullptr);
  CounterRng rng{1, make_stream(RngTag::kTest, 0, 0)};
  uint64_t idx = 0;
  for (const auto& p : params.all()) {
    if (p->name.find("omega") != std::string::npos) continue;
    for (int64_t i = 0; i < p->value.numel(); ++i) p->value.data<float>()[i] = 0.05f * rng.normal(idx++);
  }
  auto randn = [&](Shape s) {
    Tensor t = Tensor::empty(s, DType::kF32);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.normal(idx++);
    return t;
  };
  Tensor x = randn({tokens, d}), p = randn({tokens, d}), dout = randn({tokens, d});
  Tensor out = Tensor::empty({tokens, d}, DType::kF32), p_out = Tensor::empty({tokens, d}, DType::kF32);
  Tensor dx = Tensor::empty({tokens, d}, DType::kF32), db = Tensor::empty({tokens, d}, DType::kF32),
         dp = Tensor::empty({tokens, d}, DType::kF32);
  Tensor prev = Tensor::empty({tokens}, DType::kI32);
  for (int64_t t = 0; t < tokens; ++t) prev.data<int32_t>()[t] = static_cast<int32_t>(t % cfg.num_experts);
  auto step = [&]() -> Status {
    MoeLayerInputs in;
    in.x_in = x;
    in.x_base = x;
    in.p_in = p;
    in.prev_top1 = prev;
    MoeLayerOutputs o;
    o.out = out;
    o.p_out = p_out;
    MoeLayerSaved saved;
    MOE_RETURN_IF_ERROR(layer.forward(in, o, &saved, nullptr));
    MoeLayerGradOutputs g;
    g.d_out = dout;
    MoeLayerGradInputs gi{dx, db, dp, {}, {}};
    return layer.backward(g, saved, gi);
  };
  MOE_RETURN_IF_ERROR(step());
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (!std::isfinite(out.data<float>()[i]) || !std::isfinite(dx.data<float>()[i])) {
      return internal_error("check failed: non-finite output");
    }
  }
  const int iters = static_cast<int>(a.get("iterations", 5)), warm = static_cast<int>(a.get("warmup", 1));
  MOE_ASSIGN_OR_RETURN(Timing t, time_it(warm, iters, step));
  // The floor: one dense GEMM with the expert FFN's row count and width.
  Tensor ga = randn({tokens * cfg.top_k, d}), gb = randn({d, f});
  Tensor gc = Tensor::empty({tokens * cfg.top_k, f}, DType::kF32);
  MOE_ASSIGN_OR_RETURN(Timing g, time_it(warm, iters, [&]() { return kernels::gemm(ga, false, gb, false, gc); }));
  const double gemm_flops = 2.0 * tokens * cfg.top_k * d * f;
  const double layer_flops =
      3.0 * tokens * (2.0 * cfg.top_k * (2.0 * d * f) + 2.0 * d * cfg.num_experts);
  JsonLine j("layer");
  j.str("device", "cpu").str("variant", variant).num("tokens", tokens).num("d", d).num("f", f)
      .num("experts", cfg.num_experts).num("top_k", cfg.top_k).num("fwd_bwd_ms", t.median * 1e3)
      .num("tokens_per_second", tokens / t.median).num("gflops_per_second", layer_flops / t.median / 1e9)
      .num("dense_gemm_gflops_per_second", gemm_flops / g.median / 1e9)
      .num("roofline_ratio", (layer_flops / t.median) / (gemm_flops / g.median)).str("check", "ok");
  std::printf("%s\n", j.dump().c_str());
  return Status::OK();
}

}  // namespace moe::bench
