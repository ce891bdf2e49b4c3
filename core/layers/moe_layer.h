// One MoE sublayer on one rank (DESIGN.md "One MoE layer on one rank"): router -> capacity slots
// -> dispatch through capacity (or dropless) buffers and the EP all-to-all -> grouped expert FFNs
// -> exchange back -> gate-weighted combine -> residual dynamics (plain, heavy-ball, Adam,
// robust) -> statistics. Backward mirrors it, with gradients flowing through the momentum state.
//
// Inputs are split into x_in (what the router and experts see) and x_base (the residual base):
// they are the same tensor in the post-LN block and differ in a pre-LN block (x_in = LN(h),
// x_base = h). The momentum state p starts at zero before the first MoE layer of a forward pass
// and is passed from layer to layer by the model.
//
// Parameters: <prefix>.w_router [D, E], <prefix>.b_router [E] (dense); <prefix>.w1, b1, w2, b2
// (expert shards, see expert_ffn.h); <prefix>.omega [D] (dense, SparseMixer with omega).
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/base/moe_config.h"
#include "core/base/router_stats.h"
#include "core/layers/expert_ffn.h"
#include "core/layers/moe_dispatcher.h"
#include "core/layers/moe_router.h"
#include "core/layers/parameters.h"
#include "kernels/residual.h"

namespace moe {

struct MoeLayerInputs {
  TensorView x_in;       // [T, D] router and expert input
  TensorView x_base;     // [T, D] residual base
  TensorView p_in;       // [T, D] momentum state; empty means zeros
  TensorView adam_m_in;  // [T, D] Adam moments; empty means zeros
  TensorView adam_v_in;
  TensorView prev_top1;  // [T] i32 previous MoE layer's argmax; empty at the first MoE layer
  int64_t token_offset = 0;  // global id of token 0 (keys every random draw)
  int64_t step = 0;
  uint64_t seed = 0;
  bool training = true;
  // Every rank that holds tokens (the world): global AC statistics and the global-scope balance
  // and z losses are all-reduced over it. Null: this rank's tokens only.
  comm::Communicator* stats_comm = nullptr;
};

struct MoeLayerOutputs {
  TensorView out;         // [T, D] x_{t+1} (overwritten)
  TensorView p_out;       // [T, D] momentum state after this layer (overwritten)
  TensorView adam_m_out;  // [T, D] optional: Adam moments after this layer (overwritten)
  TensorView adam_v_out;
  TensorView top1;        // [T] i32 optional: this layer's argmax expert (overwritten)
};

struct MoeLayerSaved {
  RouterSaved router;
  DispatchPlan plan;
  ExpertSaved experts;
  Tensor y;        // [T, D] robust: the shifted input; empty otherwise (x_in was used)
  Tensor y_send;   // [S, D] expert outputs in send layout (combine backward)
  Tensor u;        // [T, D] SMoE output after output dropout (residual input)
  Tensor m_out;    // [T, D] Adam moments (Adam layers)
  Tensor v_out;
  bool training = true;
  CounterRng output_dropout_rng;
  int64_t token_offset = 0;
  double aux_loss = 0;  // weighted balance + z loss of this call
  // A global-scope aux loss is one quantity shared by R data ranks, so each rank's share of its
  // gradient is R times the per-rank weight the caller passes (see MoeLayerGradOutputs).
  double aux_grad_multiplier = 1.0;
};

struct MoeLayerGradOutputs {
  TensorView d_out;         // [T, D]
  TensorView d_p_out;       // [T, D] from later layers; empty means zero
  TensorView d_adam_m_out;  // empty means zero
  TensorView d_adam_v_out;
  // dL/d(aux_loss) for a per-rank loss; when the layer's balance scope is global over R data
  // ranks, the gradient uses R * aux_scale (the trainer passes 1 / (ranks * micro-batches)).
  double aux_scale = 1.0;
};

struct MoeLayerGradInputs {
  TensorView d_x_in;       // [T, D] overwritten
  TensorView d_x_base;     // [T, D] overwritten (may alias nothing else)
  TensorView d_p_in;       // [T, D] overwritten
  TensorView d_adam_m_in;  // optional, overwritten
  TensorView d_adam_v_in;
};

class MoeLayer {
 public:
  // ep_comm: the EP group (borrowed; nullable for one rank). block: the transformer block index
  // (names random streams and statistics); moe_index: 0 for the model's first MoE layer.
  MoeLayer(const std::string& prefix, const MoeLayerConfig& cfg, int block, int moe_index,
           ParameterSet* params, comm::Communicator* ep_comm);

  // Fills out, saved and (if non-null) stats. Collective over the EP group.
  Status forward(const MoeLayerInputs& in, const MoeLayerOutputs& out, MoeLayerSaved* saved,
                 RouterStatsInfo* stats);
  // Collective over the EP group. Parameter gradients accumulate.
  Status backward(const MoeLayerGradOutputs& grad_out, const MoeLayerSaved& saved,
                  const MoeLayerGradInputs& grad_in);

  const MoeLayerConfig& config() const { return cfg_; }
  int block() const { return block_; }
  int moe_index() const { return moe_index_; }

 private:
  kernels::ResidualArgs residual_args() const;
  double input_shift() const;  // robust: a_shift in y = x + a_shift p

  MoeLayerConfig cfg_;
  int block_;
  int moe_index_;
  MoeRouter router_;
  MoeDispatcher dispatcher_;
  ExpertFfn experts_;
  Parameter* omega_ = nullptr;  // [D]
};

}  // namespace moe
