// The router of one MoE layer: logits s = r W_r + b_r in the working float dtype (f32 on the CPU,
// fp32 on the GPU), where r is the layer input y, or y ⊙ M[prev_top1] for an Adaptive Clustering
// layer; then top-k softmax (or SparseMixer's masked softmax and sample); the load-balancing and
// z losses; and the router statistics.
//
// Parameters (dense, replicated): <prefix>.w_router [D, E], <prefix>.b_router [E].
#pragma once

#include <string>

#include "comm/communicator.h"
#include "core/base/moe_config.h"
#include "core/base/rng.h"
#include "core/base/router_stats.h"
#include "core/layers/parameters.h"

namespace moe {

struct RouterForwardArgs {
  TensorView y;          // [T, D] router input before the AC transform
  TensorView prev_top1;  // [T] i32 previous MoE layer's argmax, or empty (first MoE layer)
  bool training = true;
  CounterRng sparsemixer_rng;  // SparseMixer draws
  int64_t token_offset = 0;    // global id of token 0
  // For global AC statistics: the communicator over every rank that holds tokens (nullable).
  comm::Communicator* stats_comm = nullptr;
};

// Everything backward needs, owned.
struct RouterSaved {
  Tensor router_input;  // [T, D] r
  Tensor logits;        // [T, E]
  Tensor probs;         // [T, E] full softmax, or SparseMixer's masked softmax
  Tensor lse;           // [T] logsumexp of the logits (z-loss)
  Tensor idx;           // [T, K] i32 chosen experts (top-1 first)
  Tensor gate;          // [T, K] gate values (SparseMixer: c * pi_D)
  Tensor top1;          // [T] i32 argmax of the logits (the next AC layer's clusters)
  // SparseMixer only.
  Tensor mask;          // [T, E] u8
  Tensor scale;         // [T] c
  Tensor is_argmax;     // [T] u8
  // AC only (when the transform was applied).
  bool ac_applied = false;
  Tensor labels;        // [T] i32
  Tensor metric;        // [E, D]
  // The tokens the auxiliary losses are over (this rank's, or every data rank's).
  std::vector<int64_t> balance_load;  // [E]
  int64_t balance_tokens = 0;
};

class MoeRouter {
 public:
  MoeRouter(const std::string& prefix, const MoeLayerConfig& cfg, ParameterSet* params);

  // Fills `saved` and the AC and SparseMixer fields of `stats`. Collective over
  // args.stats_comm when AC statistics are global.
  Status forward(const RouterForwardArgs& args, RouterSaved* saved, RouterStatsInfo* stats);

  // The weighted balance + z loss from the saved probabilities and this rank's per-expert load
  // (before capacity). With BalanceScope::kGlobal and a `data_comm`, the loads, probability sums
  // and token counts of every data rank are all-reduced first (collective over data_comm). Adds
  // the unweighted losses, the entropy and the top-1 gate sums to `stats`.
  StatusOr<double> aux_loss(const TensorView& load, comm::Communicator* data_comm,
                            RouterSaved* saved, RouterStatsInfo* stats) const;

  // d_gate [T, K]: gradient w.r.t. the gate values. aux_scale: dL/d(aux loss of this layer)
  // (1 for a plain sum). Accumulates into d_y [T, D] and the router parameter gradients.
  Status backward(const TensorView& d_gate, const RouterSaved& saved, double aux_scale,
                  const TensorView& d_y);

 private:
  Status compute_ac_metric(const RouterForwardArgs& args, RouterSaved* saved,
                           RouterStatsInfo* stats);

  MoeLayerConfig cfg_;
  Parameter* w_;  // [D, E]
  Parameter* b_;  // [E]
};

}  // namespace moe
