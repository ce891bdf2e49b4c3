// Token exchange of one MoE layer across the expert-parallel (EP) group, through capacity buffers
// or, in dropless mode, buffers sized from exchanged counts. The same code runs at one rank (no
// communicator: the exchange is a copy), so the distributed path is the tested path.
//
// Layouts (R ranks, E experts, E_l = E / R local experts, C capacity):
//   send buffer  [S, D]: one block per global expert e (rank e / E_l owns it), in expert order;
//                a block is C rows (capacity; unfilled rows are zero) or load_e rows (dropless).
//   recv buffer  [S', D]: per source rank, the blocks of my E_l experts, in (source, expert) order.
//   compact      [M, D]: the filled rows only, grouped by local expert (expert-major, then source
//                rank, then slot): the grouped-GEMM input, with E_l + 1 offsets.
// Forward: x -gather-> send -exchange-> recv -gather-> compact -> experts -> compact -gather->
// recv -exchange back-> send -> combine. Backward runs the same maps the other way. Every map is
// a row gather or an in-order scatter-add: deterministic.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "core/base/moe_config.h"
#include "core/base/tensor.h"

namespace moe {

struct DispatchPlan {
  int64_t tokens = 0;
  int64_t capacity = -1;  // C, or -1 in dropless mode
  Tensor slot;            // [T, K] i32 position in the expert's block, -1 if dropped
  Tensor load;            // [E] i64 assignments before capacity
  Tensor kept;            // [E] i64 assignments that got a slot
  Tensor row;             // [T, K] i32 send-buffer row of each assignment, -1 if dropped
  Tensor send_token;      // [S] i32 source token of each send row, -1 for an empty slot
  Tensor send_key;        // [S] i64 dropout key (global token * K + k), -1 for an empty slot
  comm::AllToAllPlan exchange;  // rows to and from each EP rank
  Tensor recv_key;        // [S'] i64
  Tensor compact_rows;    // [M] i32 recv row of each compact row
  Tensor recv_to_compact; // [S'] i32 compact row of each recv row, -1 for an empty slot
  std::vector<int64_t> expert_offsets;  // [E_l + 1] compact offsets per local expert
  int64_t dropped_slots = 0;
  int64_t fully_dropped_tokens = 0;
};

class MoeDispatcher {
 public:
  // ep_comm: the EP group (borrowed, nullable for one rank). Its size must divide num_experts.
  MoeDispatcher(const MoeLayerConfig& cfg, comm::Communicator* ep_comm);

  int ep_size() const;
  int ep_rank() const;
  int64_t local_experts() const;
  int64_t first_local_expert() const;

  // Builds the plan for idx [T, K] (collective over the EP group: the per-expert counts and the
  // capacity are exchanged; ranks whose capacities differ get kInvalidArgument).
  Status plan(const TensorView& idx, int64_t token_offset, DispatchPlan* plan) const;

  // x [T, D] -> compact [M, D] on the expert ranks.
  Status dispatch(const TensorView& x, const DispatchPlan& plan, Tensor* compact) const;
  // Expert outputs compact [M, D] -> send-layout rows [S, D] back on the home ranks.
  Status gather_back(const TensorView& compact, const DispatchPlan& plan, Tensor* send) const;
  // Backward of gather_back: d_send [S, D] -> d_compact [M, D].
  Status gather_back_backward(const TensorView& d_send, const DispatchPlan& plan,
                              Tensor* d_compact) const;
  // Backward of dispatch: d_compact [M, D] -> dx [T, D] (accumulated).
  Status dispatch_backward(const TensorView& d_compact, const DispatchPlan& plan,
                           const TensorView& dx) const;

 private:
  Status exchange(const TensorView& in, const comm::AllToAllPlan& plan,
                  const TensorView& out) const;

  MoeLayerConfig cfg_;
  comm::Communicator* comm_;
};

}  // namespace moe
