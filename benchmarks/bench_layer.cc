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
//                     [--threads 0]   (CPU threads; 0 = every core) [--device cpu|cuda]
// gemm_share is the layer's time inside BLAS tiles over its whole time (the rest: routing,
// dispatch, activation, combine).
#include <cmath>
#include <cstdio>

#include "benchmarks/bench_util.h"
#include "benchmarks/layer_fixture.h"
#include "comm/world.h"
#include "core/base/rng.h"
#include "kernels/gemm.h"
#include "kernels/init.h"
#include "kernels/reference/blas_ref.h"

namespace moe::bench {

Status bench_layer(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(Args a, Args::parse(argc, argv,
                                           {"tokens", "d", "f", "experts", "top-k", "variant",
                                            "iterations", "warmup", "threads", "device"}));
  if (world->size() != 1) return invalid_argument_error("momoe-bench layer runs on one rank");
  MOE_ASSIGN_OR_RETURN(LayerVariant variant, parse_variant(a.get_str("variant", "plain")));
  const MoeLayerConfig cfg = layer_config(a.get("d", 352), a.get("f", 352), a.get("experts", 16),
                                          a.get("top-k", 2), variant);
  MOE_RETURN_IF_ERROR(cfg.validate("bench"));
  const int64_t tokens = a.get("tokens", 2048), d = cfg.d_model, f = cfg.d_expert;
  const int threads = static_cast<int>(a.get("threads", 0));
  const std::string device = a.get_str("device", "cpu");
  if (device != "cpu" && device != "cuda") {
    return invalid_argument_error("--device ", device, " is not one of cpu, cuda");
  }
  int cuda_device = -1;
  if (device == "cuda") {
    MOE_ASSIGN_OR_RETURN(cuda_device, choose_cuda_device(0));
  }
  LayerFixture fixture(cfg, tokens, nullptr, 0, DType::kF32, threads, cuda_device);
  Context& ctx = fixture.context();
  // One forward and backward, finished (a GPU runs them asynchronously until the wait).
  auto step = [&]() -> Status {
    MOE_RETURN_IF_ERROR(fixture.forward_backward());
    return ctx.synchronize();
  };
  MOE_RETURN_IF_ERROR(step());
  MOE_ASSIGN_OR_RETURN(bool finite, fixture.outputs_finite());
  if (!finite) return internal_error("check failed: non-finite output");
  const int iters = static_cast<int>(a.get("iterations", 5));
  const int warm = static_cast<int>(a.get("warmup", 1));
  kernels::ref::reset_gemm_counters();
  kernels::ref::set_gemm_timing(true);
  MOE_ASSIGN_OR_RETURN(Timing t, time_it(warm, iters, step));
  kernels::ref::set_gemm_timing(false);
  const double gemm_seconds = kernels::ref::gemm_counters().seconds / (warm + iters);
  // The floor: one dense GEMM with the expert FFN's row count and width.
  MOE_ASSIGN_OR_RETURN(Tensor ga, ctx.empty({tokens * cfg.top_k, d}, DType::kF32));
  MOE_ASSIGN_OR_RETURN(Tensor gb, ctx.empty({d, f}, DType::kF32));
  MOE_ASSIGN_OR_RETURN(Tensor gc, ctx.empty({tokens * cfg.top_k, f}, DType::kF32));
  MOE_RETURN_IF_ERROR(kernels::init_normal(ctx, ga, 1.0, CounterRng{3, make_stream(RngTag::kTest, 3, 0)}));
  MOE_RETURN_IF_ERROR(kernels::init_normal(ctx, gb, 1.0, CounterRng{3, make_stream(RngTag::kTest, 3, 1)}));
  MOE_ASSIGN_OR_RETURN(Timing g, time_it(warm, iters, [&]() {
                         MOE_RETURN_IF_ERROR(kernels::gemm(ctx, ga, false, gb, false, gc));
                         return ctx.synchronize();
                       }));
  const double gemm_flops = 2.0 * tokens * cfg.top_k * d * f;
  const double layer_flops =
      3.0 * tokens * (2.0 * cfg.top_k * (2.0 * d * f) + 2.0 * d * cfg.num_experts);
  JsonLine j("layer");
  j.str("device", ctx.device().to_string())
      .str("variant", variant_name(variant))
      .num("tokens", tokens)
      .num("d", d)
      .num("f", f)
      .num("experts", cfg.num_experts)
      .num("top_k", cfg.top_k)
      .num("threads", fixture.context().threads())
      .num("fwd_bwd_ms", t.median * 1e3)
      // The CPU's BLAS calls are timed one by one; a GPU's kernels are not (-1).
      .num("gemm_share", ctx.device().is_host() ? gemm_seconds / t.mean : -1.0)
      .num("tokens_per_second", tokens / t.median)
      .num("gflops_per_second", layer_flops / t.median / 1e9)
      .num("dense_gemm_gflops_per_second", gemm_flops / g.median / 1e9)
      .num("roofline_ratio", (layer_flops / t.median) / (gemm_flops / g.median))
      .str("check", "ok");
  std::printf("%s\n", j.dump().c_str());
  return Status::OK();
}

}  // namespace moe::bench
