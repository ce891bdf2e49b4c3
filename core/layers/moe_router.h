// The router of one MoE layer, in full precision whatever the activations (F: f32, or f64 in
// gradient tests): logits s = r W_r + b_r, where r is the layer input y (widened to F), or
// y ⊙ M[prev_top1] for an Adaptive Clustering layer; then top-k routing with softmax or sigmoid
// scores, renormalised or not and scaled (kernels::topk_route; or SparseMixer's masked softmax
// and sample); the load-balancing, z and sequence-wise balance losses; and the router statistics,
// accumulated into the layer's device statistics block (types/router_stats.h). Nothing is read on
// the host.
//
// Parameters (dense, replicated, F): <prefix>.w_router [D, E], <prefix>.b_router [E] (only with
// MoeLayerConfig::linear_bias; without it the logits are r W_r).
#pragma once

#include <string>

#include "base/rng.h"
#include "comm/communicator.h"
#include "core/layers/parameters.h"
#include "kernels/router.h"
#include "types/moe_config.h"
#include "types/router_stats.h"

namespace moe {

struct RouterForwardArgs {
  Tensor y;          // [T, D] act: the router input before the AC transform
  Tensor prev_top1;  // [T] i32 previous MoE layer's argmax, or empty (first MoE layer)
  bool training = true;
  CounterRng sparsemixer_rng;  // SparseMixer draws
  int64_t token_offset = 0;    // global id of token 0
  // For global AC statistics: the communicator over every rank that holds tokens (nullable).
  comm::Communicator* stats_comm = nullptr;
  TensorView stats;  // the layer's statistics block (f64), or empty
  // Tokens per sequence (rows are sequence-major, b S + s) for the sequence-wise balance loss and
  // its statistic; 0: unknown (neither is computed, and a seq_balance_loss_coef > 0 is an error).
  int64_t seq_len = 0;
};

// Everything backward needs, owned (shared storage).
struct RouterSaved {
  Tensor router_input;  // [T, D] F: r
  Tensor logits;        // [T, E] F
  Tensor probs;         // [T, E] F: full softmax, or SparseMixer's masked softmax
  Tensor lse;           // [T] F: logsumexp of the logits (z-loss)
  Tensor idx;           // [T, K] i32 chosen experts (top-1 first)
  Tensor gate;          // [T, K] F gate values (SparseMixer: c * pi_D)
  Tensor seq_counts;    // [T / S, E] i64 routing counts per sequence (kernels::sequence_counts)
  Tensor top1;          // [T] i32 argmax of the logits (the next AC layer's clusters)
  // SparseMixer only.
  Tensor mask;       // [T, E] u8
  Tensor scale;      // [T] F: c
  Tensor is_argmax;  // [T] u8
  // AC only (when the transform was applied).
  bool ac_applied = false;
  Tensor labels;  // [T] i32
  Tensor metric;  // [E, D] F
  // AC with unit-norm expert embeddings (AcLogits::kUnitNormEmbeddings): logits = r W_n, no bias.
  bool unit_norm = false;
  Tensor w_unit;    // [D, E] F: W_r with unit-norm columns
  Tensor inv_norm;  // [E] F: 1 / ||W_r[:, e]||
  // The sums the auxiliary losses were computed from (f64 [2E + 2], kernels/router.h), over this
  // rank's tokens or, for the global scope, every data rank's: the backward reads loads and T.
  Tensor aux_packed;
};

class MoeRouter {
 public:
  MoeRouter(const std::string& prefix, const MoeLayerConfig& cfg, ParameterSet* params);

  // Fills `saved` and the AC and SparseMixer slots of args.stats. Collective over
  // args.stats_comm when AC statistics are global.
  Status forward(const RouterForwardArgs& args, RouterSaved* saved);

  // The balance, z and sequence losses from the saved probabilities, routing counts and this
  // rank's per-expert load (before capacity, i64 [E]), as f64 [4] (balance, z, weighted, seq;
  // kernels::aux_losses). With BalanceScope::kGlobal and a `data_comm`, the packed sums of every
  // data rank are all-reduced first (collective over data_comm). Adds the losses, the entropy and
  // the top-1 gate sum into `stats` (may be empty).
  StatusOr<Tensor> aux_loss(const Tensor& load, comm::Communicator* data_comm, RouterSaved* saved,
                            const TensorView& stats) const;

  // d_gate [T, K] F: gradient w.r.t. the gate values. aux_scale: dL/d(aux loss of this layer)
  // (1 for a plain sum). Accumulates into d_y [T, D] (act) and the router parameter gradients.
  Status backward(const Tensor& d_gate, const RouterSaved& saved, double aux_scale,
                  const TensorView& d_y);

  // Loss-free balancing (bias_update_rate > 0; kernels/load_balance.h). The bias <prefix>.
  // score_bias [E] F is a dense parameter that no gradient reaches and the optimizer leaves as it
  // is (no weight decay), so checkpoints save and reshard it like any replicated weight; routing
  // adds it to the scores to choose experts. A training forward adds the micro-batch's global
  // loads (from the all-reduced aux sums, the same on every rank) into the step's load; after the
  // step's update, update_score_bias() moves the bias by rate * sign(mean - load) and restarts
  // the step's load (also after a skipped step, with apply false). It moves the bias's value
  // (F: the master itself, or with sharded masters its whole copy, whose part in this rank's
  // chunk goes on to the master: ParameterSet::store_value). No-ops without a bias.
  bool has_score_bias() const { return score_bias_ != nullptr; }
  Status accumulate_step_load(const RouterSaved& saved);
  Status update_score_bias(bool apply);
  // Copies the bias into the statistics block's bias slots (f64 [E]) and marks them set.
  Status report_score_bias(const TensorView& stats) const;

 private:
  Status compute_ac_metric(const RouterForwardArgs& args, RouterSaved* saved);
  // The logits [T, E] F of saved->router_input (into saved->logits; unit-norm state too).
  Status compute_logits(RouterSaved* saved);
  // Top-k (or SparseMixer) routing of saved->logits into the saved routing tensors.
  Status route(const RouterForwardArgs& args, RouterSaved* saved);
  kernels::RouteOptions route_options() const;
  // The auxiliary losses' weights (the config's coefficients times scale) and score function.
  kernels::AuxLossWeights aux_weights(double scale) const;

  Context& ctx_;
  ParameterSet* params_;  // borrowed: the model's
  MoeLayerConfig cfg_;
  Parameter* w_;                     // [D, E]
  Parameter* b_ = nullptr;           // [E], or null without linear_bias
  Parameter* score_bias_ = nullptr;  // [E], loss-free balancing only
  Tensor step_load_;                 // [E] f64: this step's global loads (loss-free balancing)
};

}  // namespace moe
