// One MoE sublayer on one rank (DESIGN.md "One MoE layer on one rank"): router -> dispatch
// layout (capacity slots) -> exchange into the expert blocks (padded capacity buffers, or
// dropless) -> expert FFNs -> exchange back -> gate-weighted combine -> residual dynamics (plain,
// heavy-ball, Adam, robust) -> statistics. Backward mirrors it, with gradients flowing through
// the momentum state. Device-neutral: every step is a kernel or a collective on the layer's
// Context; nothing is read on the host, and in capacity mode nothing waits (dropless mode, and
// a deduplicating dispatch in either mode, read the exchanged counts once per forward).
//
// Inputs are split into x_in (what the router and experts see) and x_base (the residual base):
// they are the same tensor in the post-LN block and differ in a pre-LN block (x_in = LN(h),
// x_base = h). The momentum state p starts at zero before the first MoE layer of a forward pass
// and is passed from layer to layer by the model. Dtypes: x, out and the gradients through them
// are activations (act); the momentum state, the Adam moments, the router and the losses are
// full precision (F).
//
// Parameters: <prefix>.w_router [D, E], <prefix>.b_router [E] (dense; the bias only with
// linear_bias); <prefix>.w1, b1, w2, b2 (expert shards, see expert_ffn.h); <prefix>.omega [D]
// (dense, SparseMixer with omega).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/layers/expert_ffn.h"
#include "core/layers/moe_dispatcher.h"
#include "core/layers/moe_router.h"
#include "core/layers/parameters.h"
#include "core/layers/shared_experts.h"
#include "kernels/residual.h"
#include "types/moe_config.h"
#include "types/router_stats.h"

namespace moe {

struct MoeLayerInputs {
  Tensor x_in;       // [T, D] act: router and expert input
  Tensor x_base;     // [T, D] act: residual base
  Tensor p_in;       // [T, D] F momentum state; empty means zeros
  Tensor adam_m_in;  // [T, D] F Adam moments; empty means zeros
  Tensor adam_v_in;
  Tensor prev_top1;          // [T] i32 previous MoE layer's argmax; empty at the first MoE layer
  int64_t token_offset = 0;  // global id of token 0 (keys every random draw)
  // Tokens per sequence (rows are sequence-major): the sequence-wise balance loss needs it; 0:
  // unknown (then that loss must be off, and its statistic stays zero).
  int64_t seq_len = 0;
  int64_t step = 0;
  uint64_t seed = 0;
  DeviceStep device_step;  // a step in device memory (StepContext::device_step); keys use seq_len
  bool training = true;
  bool training_capacity = false;  // training off, capacity as in training (StepContext)
  // Every rank that holds tokens (the world): global AC statistics and the global-scope balance
  // and z losses are all-reduced over it. Null: this rank's tokens only.
  comm::Communicator* stats_comm = nullptr;
  // This layer's statistics block (f64 [RouterStatsLayout(E).size()], accumulated), or empty.
  TensorView stats;
  // Selective recomputation: the experts and shared experts keep their input rows but not their
  // hidden rows, which backward recomputes (ExpertFfn, DenseFfn).
  bool recompute_hidden = false;
  // A re-run of a forward already taken (FULL recomputation, to rebuild `saved` for backward):
  // it must decide and compute the same and count nothing twice, so the loss-free balancing's
  // step load is left alone (the caller passes no stats block and drops the aux losses).
  bool replay = false;
};

struct MoeLayerOutputs {
  Tensor out;         // [T, D] act: x_{t+1}
  Tensor p_out;       // [T, D] F: momentum state after this layer
  Tensor adam_m_out;  // [T, D] F: Adam moments after this layer (Adam layers; else the inputs)
  Tensor adam_v_out;
  Tensor top1;  // [T] i32: this layer's argmax expert
};

struct MoeLayerSaved {
  RouterSaved router;
  DispatchPlan plan;
  ExpertSaved experts;
  SharedExperts::Saved shared;  // the shared experts (shared_experts > 0)
  Tensor y_send;                // [S, D] expert outputs in send layout (combine backward)
  Tensor u;      // [T, D] SMoE output (routed + shared) after output dropout (residual input)
  Tensor m_out;  // [T, D] F Adam moments (Adam layers)
  Tensor v_out;
  bool robust_shift = false;  // the router and experts saw y = x + a p
  bool training = true;
  CounterRng output_dropout_rng;
  int64_t token_offset = 0;
  // (balance, z, weighted, seq) of this call, f64 [4] on the device (kernels::aux_losses).
  Tensor aux;
  // A global-scope aux loss is one quantity shared by R data ranks, so each rank's share of its
  // gradient is R times the per-rank weight the caller passes (see MoeLayerGradOutputs).
  double aux_grad_multiplier = 1.0;
};

struct MoeLayerGradOutputs {
  Tensor d_out;         // [T, D] act
  Tensor d_p_out;       // [T, D] F from later layers; empty means zero
  Tensor d_adam_m_out;  // F; empty means zero
  Tensor d_adam_v_out;
  // dL/d(aux_loss) for a per-rank loss; when the layer's balance scope is global over R data
  // ranks, the gradient uses R * aux_scale (the trainer passes 1 / (ranks * micro-batches)).
  double aux_scale = 1.0;
};

struct MoeLayerGradInputs {
  Tensor d_x_in;       // [T, D] act
  Tensor d_x_base;     // [T, D] act
  Tensor d_p_in;       // [T, D] F
  Tensor d_adam_m_in;  // [T, D] F (Adam layers: their gradient; others: passed through)
  Tensor d_adam_v_in;
};

// The residual dynamics a layer's config selects, as the kernel's per-element coefficients
// (kernels/residual.h): what the layer computes, and what momoe-export writes to config.json.
kernels::ResidualArgs residual_args_for(const MoeLayerConfig& cfg);
// Robust MomentumSMoE: a in y = x + a p (the router's and experts' shifted input); 0 otherwise.
double input_shift_for(const MoeLayerConfig& cfg);

class MoeLayer {
 public:
  // ep_comm: the EP group (borrowed; nullable for one rank). block: the transformer block index
  // (names random streams and statistics); moe_index: 0 for the model's first MoE layer.
  MoeLayer(const std::string& prefix, const MoeLayerConfig& cfg, int block, int moe_index,
           ParameterSet* params, comm::Communicator* ep_comm);

  // Collective over the EP group.
  StatusOr<MoeLayerOutputs> forward(const MoeLayerInputs& in, MoeLayerSaved* saved);
  // Collective over the EP group. Parameter gradients accumulate.
  StatusOr<MoeLayerGradInputs> backward(const MoeLayerGradOutputs& grad_out,
                                        const MoeLayerSaved& saved);

  // Loss-free balancing: after a step, moves the router's selection bias by the step's global
  // loads (apply) or only forgets them (a skipped step); MoeRouter::update_score_bias.
  Status update_score_bias(bool apply) { return router_.update_score_bias(apply); }

  const MoeLayerConfig& config() const { return cfg_; }
  int block() const { return block_; }
  int moe_index() const { return moe_index_; }
  MoeDispatcher& dispatcher() { return dispatcher_; }

 private:
  // The stages of forward, in order.
  Status check_inputs(const MoeLayerInputs& in) const;
  // The robust shift (if any), the router and the dispatch plan; returns the experts' input.
  StatusOr<Tensor> route_and_plan(const MoeLayerInputs& in, MoeLayerSaved* saved);
  // Dispatch, experts, gather back, the weighted combine (and output dropout) into saved->u.
  Status run_experts_and_combine(const MoeLayerInputs& in, const Tensor& y, MoeLayerSaved* saved);
  // The residual dynamics: the layer's outputs and state.
  StatusOr<MoeLayerOutputs> apply_residual(const MoeLayerInputs& in, MoeLayerSaved* saved);
  // The auxiliary losses and the statistics block's sums.
  Status aux_loss_and_stats(const MoeLayerInputs& in, const MoeLayerOutputs& out,
                            MoeLayerSaved* saved);

  Context& ctx_;
  MoeLayerConfig cfg_;
  int block_;
  int moe_index_;
  MoeRouter router_;
  MoeDispatcher dispatcher_;
  ExpertFfn experts_;
  Parameter* omega_ = nullptr;             // [D] F
  std::unique_ptr<SharedExperts> shared_;  // the shared experts, or null
};

}  // namespace moe
