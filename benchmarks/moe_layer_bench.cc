// CPU MoE layer forward and forward+backward throughput (Google Benchmark).
//
// FLOP model (DESIGN.md "Performance model"), per token, forward:
//   experts: K * (2 * D * F) multiply-adds = K * 4 * D * F FLOPs
//   router:  D * E multiply-adds           = 2 * D * E FLOPs
// i.e. flops_fwd = 2 * K * (2 * D * F) + 2 * D * E, and forward + backward = 3 * flops_fwd.
// Reported: tokens/s and GFLOP/s against that count (padding rows and the residual dynamics are
// not counted as useful work). Before timing, every configuration checks that a forward and
// backward pass produce finite outputs (a pre-check; the exact checks live in tests/).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "base/cpu_info.h"
#include "benchmarks/layer_fixture.h"
#include "kernels/cpu/blas_library.h"

namespace moe::bench {
namespace {

constexpr LayerVariant kVariants[] = {LayerVariant::kPlain, LayerVariant::kMomentum,
                                      LayerVariant::kAc, LayerVariant::kSparseMixer};

double flops_forward(int64_t tokens, int64_t d, int64_t f, int64_t e, int64_t k) {
  return static_cast<double>(tokens) * (2.0 * k * (2.0 * d * f) + 2.0 * d * e);
}

void run(benchmark::State& state, bool with_backward) {
  const int64_t tokens = state.range(0), d = state.range(1), f = state.range(2), e = state.range(3),
                k = state.range(4);
  const LayerVariant variant = kVariants[state.range(5)];
  const MoeLayerConfig cfg = layer_config(d, f, e, k, variant);
  LayerFixture fixture(cfg, tokens, nullptr);
  if (!fixture.forward_backward().ok() || !fixture.outputs_finite().value_or(false)) {
    state.SkipWithError("check failed: the layer did not produce finite outputs");
    return;
  }
  for (auto _ : state) {
    Status s = with_backward ? fixture.forward_backward() : [&]() {
      MoeLayerSaved saved;
      return fixture.forward(&saved);
    }();
    if (!s.ok()) {
      state.SkipWithError(s.to_string().c_str());
      return;
    }
  }
  const double flops = flops_forward(tokens, d, f, e, cfg.top_k) * (with_backward ? 3 : 1);
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(variant_name(variant));
}

void BM_MoeLayerForward(benchmark::State& state) { run(state, false); }
void BM_MoeLayerForwardBackward(benchmark::State& state) { run(state, true); }

// T, D, F, E, K, variant. The second shape is SMoE-medium's layer (D = F = 352, 16 experts).
void shapes(benchmark::internal::Benchmark* b) {
  for (int v = 0; v < 4; ++v) b->Args({1024, 128, 256, 8, 2, v});
  for (int v = 0; v < 4; ++v) b->Args({2048, 352, 352, 16, 2, v});
  b->ArgNames({"T", "D", "F", "E", "K", "variant"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_MoeLayerForward)->Apply(shapes);
BENCHMARK(BM_MoeLayerForwardBackward)->Apply(shapes);

}  // namespace
}  // namespace moe::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (moe::Status blas = moe::kernels::ref::load_blas(); !blas.ok()) {
    std::fprintf(stderr, "moe_layer_bench: %s\n", blas.to_string().c_str());
    return 2;
  }
  // The context block (and --benchmark_format=json's "context") names the CPU and the BLAS.
  const moe::kernels::ref::BlasInfo& blas = moe::kernels::ref::blas_info();
  benchmark::AddCustomContext("cpu", moe::cpu_info().description());
  benchmark::AddCustomContext("cpu_isa", moe::cpu_info().isa_summary());
  benchmark::AddCustomContext("blas", blas.summary());
  if (!blas.warning.empty()) benchmark::AddCustomContext("blas_warning", blas.warning);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
