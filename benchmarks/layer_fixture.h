// One MoE layer with deterministic f32 parameters and inputs, ready to run forward and backward:
// shared by the layer benchmarks (moe_layer_bench, momoe-bench layer and scaling).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/layers/moe_layer.h"

namespace moe::bench {

// The layer's routing and residual variants: plain SMoE, MomentumSMoE (heavy ball), AdamSMoE,
// Robust MomentumSMoE, the Adaptive Clustering router, SparseMixer (top 1).
enum class LayerVariant { kPlain, kMomentum, kAdam, kRobust, kAc, kSparseMixer };
const char* variant_name(LayerVariant v);
// "plain" | "momentum" | "adam" | "robust" | "ac" | "sparsemixer"; kInvalidArgument otherwise.
StatusOr<LayerVariant> parse_variant(const std::string& name);

// The benchmarks' layer config: capacity 1.25, ReLU, the variant's router and residual.
MoeLayerConfig layer_config(int64_t d, int64_t f, int64_t experts, int64_t top_k, LayerVariant v);

// The benchmarks' context: the host with `threads` (0: every core), or GPU `cuda_device` (>= 0;
// aborts when it cannot be used).
std::unique_ptr<Context> make_bench_context(int threads, int cuda_device);

class LayerFixture {
 public:
  // `rank` offsets the input draws and the token ids (EP runs: every rank its own tokens).
  // act: the activation dtype (f32, or bf16 for the BF16 precision policy). threads: the host
  // context's threads (0: every core). cuda_device >= 0: the layer runs on that GPU instead
  // (aborts when it cannot be used: check choose_cuda_device first).
  LayerFixture(const MoeLayerConfig& cfg, int64_t tokens, comm::Communicator* comm, int rank = 0,
               DType act = DType::kF32, int threads = 1, int cuda_device = -1);
  Status forward(MoeLayerSaved* saved);
  Status backward(const MoeLayerSaved& saved);
  Status forward_backward();
  // False when the last forward's output or input gradient holds a NaN or infinity.
  StatusOr<bool> outputs_finite();
  const MoeLayerConfig& config() const { return cfg_; }
  Context& context() { return *ctx_; }

 private:
  MoeLayerConfig cfg_;
  int64_t token_offset_;
  std::unique_ptr<Context> ctx_;
  ParameterSet params_;
  std::unique_ptr<MoeLayer> layer_;
  Tensor x_, p_, prev_top1_, d_out_, out_, d_x_;
  Tensor adam_m_, adam_v_;  // AdamSMoE's incoming moments (a layer past the first); else empty
};

}  // namespace moe::bench
