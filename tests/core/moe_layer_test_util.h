// Test harness for the MoE layer: builds a layer in f64 on the (unguarded) host test context with
// deterministic parameters, runs forward and backward, and exposes a scalar loss for
// finite-difference checks:
//   L = <w_out, out> + <w_p, p_out> + <w_m, m_out> + <w_v, v_out> + aux_scale * aux_loss.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/layers/moe_layer.h"
#include "tests/testing/gradient_check.h"

namespace moe::testing {

struct LayerHarness {
  MoeLayerConfig cfg;
  int64_t tokens = 0;
  std::unique_ptr<Context> ctx;  // one per harness: ranks of the Local backend are threads
  std::unique_ptr<ParameterSet> params;
  std::unique_ptr<MoeLayer> layer;
  Tensor x, x_base, p_in, m_in, v_in, prev_top1;
  Tensor w_out, w_p, w_m, w_v;  // the loss weights (= upstream gradients)
  bool separate_base = false;   // pre-LN style: x_base != x_in
  bool with_state = true;       // p_in given (else empty = zeros)
  bool with_adam_state = false;
  bool training = true;
  double aux_scale = 1.0;
  int64_t step = 3;
  uint64_t seed = 11;
  comm::Communicator* ep_comm = nullptr;
  int64_t token_offset = 1000;  // global id of token 0 (keys dropout, SparseMixer)
  int64_t seq_len = 0;          // MoeLayerInputs::seq_len (tokens per sequence; 0: unknown)
  comm::Communicator* stats_comm = nullptr;  // MoeLayerInputs::stats_comm (global statistics)

  LayerHarness(const MoeLayerConfig& config, int64_t num_tokens, uint64_t fill_seed,
               comm::Communicator* comm = nullptr);

  // Runs forward; returns L. `stats` may be null (else the layer's statistics block, read back).
  double forward(MoeLayerSaved* saved, RouterStatsInfo* stats = nullptr, Tensor* out = nullptr,
                 Tensor* p_out = nullptr, Tensor* top1 = nullptr);
  // Runs forward and backward; fills the parameter gradients (after zeroing) and the input
  // gradients.
  void backward(Tensor* d_x, Tensor* d_x_base, Tensor* d_p_in, Tensor* d_m_in, Tensor* d_v_in);
  // Every parameter as a finite-difference target (analytic = its grad after backward()).
  std::vector<GradTarget> param_targets(const std::vector<std::string>& skip = {});
};

// Small config used by most tests: D = 4, F = 5, E = 4, K = 2, GELU (smooth, for differences).
MoeLayerConfig small_config();

// The weighted aux loss (balance_coef * balance + z_coef * z + seq_coef * seq) a forward saved.
double aux_loss(const MoeLayerSaved& saved);
// A zero-filled [rows, cols] f64 tensor in place of an empty one (gradients passed through).
Tensor or_zeros(const Tensor& t, int64_t rows, int64_t cols);

}  // namespace moe::testing
