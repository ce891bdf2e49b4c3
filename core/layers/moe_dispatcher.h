// Token exchange of one MoE layer across the expert-parallel (EP) group. The same code runs at
// one rank (no communicator: the receive buffer is the send buffer), so the distributed path is
// the tested path.
//
// Layouts (R ranks, E experts, E_l = E / R local experts, C capacity, T tokens, K top-k):
//   send buffer [S, D]: one block per global expert e, in expert order (rank e / E_l owns it):
//     C rows (capacity mode, S = E * C; unfilled rows are zero) or load_e rows (dropless,
//     S = T * K). The rows bound for one rank are contiguous. (With a communicator, the dispatch
//     leaves my own rank's rows of it unwritten: they go straight to the receive buffer.)
//   receive buffer [M, D]: per source rank r, the blocks of my E_l experts: block b = r * E_l + l
//     (kernels/expert_blocks.h). The expert GEMMs run on it in place, no compaction.
// Capacity mode: the exchanges are equal-chunk all-to-alls of [R, E_l * C, D] (the dispatch's is
// an all-to-all-v of the same chunks less my own): no counts are exchanged and nothing is read on
// the host; the padded blocks' filled prefixes are counted on the device from the exchanged keys.
// Every rank of the group must use one C, i.e. one T: the first forward at a new token count
// checks this (a host-side collective, agree_tokens()).
// Dropless mode: the per-expert counts are exchanged on the device and read back once (the
// layer's one synchronisation) to size the receive buffer and the all-to-all-v.
//
// Forward: x -gather-> send -exchange-> recv -> experts -> recv -exchange back-> send -> combine.
// The dispatch gathers the rows for this rank's own experts straight into the receive buffer, and
// its exchange moves only the peers' rows (AllToAllPlan::without).
// Gathers into buffers larger than the caches use streaming stores on the CPU (row_copy.h).
// Backward runs the same maps the other way; the dispatch backward is a per-token gather-sum.
// Every map is a row gather: deterministic, no atomics.
#pragma once

#include <set>
#include <vector>

#include "base/context.h"
#include "base/tensor.h"
#include "comm/communicator.h"
#include "kernels/expert_blocks.h"
#include "types/moe_config.h"

namespace moe {

struct DispatchPlan {
  int64_t tokens = 0;
  int64_t capacity = -1;         // C, or -1 in dropless mode
  Tensor slot;                   // [T, K] i32 position in the expert's block, -1 if dropped
  Tensor row;                    // [T, K] i32 send-buffer row of each assignment, -1 if dropped
  Tensor load;                   // [E] i64 assignments before capacity
  Tensor kept;                   // [E] i64 assignments that got a slot
  Tensor send_token;             // [S] i32 source token of each send row, -1 for an empty slot
  Tensor send_key;               // [S] i64 dropout key (global token * K + k), -1 for an empty slot
  Tensor recv_key;               // [M] i64 the received rows' keys (-1: padding)
  kernels::ExpertBlocks blocks;  // the receive buffer's blocks
  comm::AllToAllPlan exchange;   // rows to and from each EP rank
};

class MoeDispatcher {
 public:
  // ep_comm: the EP group (borrowed, nullable for one rank). Its size must divide num_experts.
  MoeDispatcher(const MoeLayerConfig& cfg, Context* ctx, comm::Communicator* ep_comm);

  int ep_size() const;
  int ep_rank() const;
  int64_t local_experts() const;
  int64_t first_local_expert() const;
  // C = ceil(capacity_factor * T * K / E), or -1 in dropless mode. With training off the
  // eval_capacity_factor applies instead (0: dropless).
  int64_t capacity(int64_t tokens, bool training = true) const;

  // Capacity mode, collective over the EP group the first time `tokens` is seen: every rank
  // must pass the same count (one C everywhere); otherwise kInvalidArgument naming the counts
  // and capacities, on every rank. Host values only (no device work).
  Status agree_tokens(int64_t tokens);

  // Builds the plan for idx [T, K] i32 (collective over the EP group). `drops` (f64 [2], may be
  // empty) accumulates the dropped assignments and fully dropped tokens. `training` picks the
  // capacity (capacity()).
  Status plan(const Tensor& idx, int64_t token_offset, const TensorView& drops, DispatchPlan* plan,
              bool training = true);
  // x [T, D] -> the expert rows [M, D] (the receive buffer, in blocks).
  StatusOr<Tensor> dispatch(const Tensor& x, const DispatchPlan& plan) const;
  // Expert outputs [M, D] -> send-layout rows [S, D] back on the home ranks.
  StatusOr<Tensor> gather_back(const Tensor& y, const DispatchPlan& plan) const;
  // Backward of gather_back: d_send [S, D] -> d_y [M, D].
  StatusOr<Tensor> gather_back_backward(const Tensor& d_send, const DispatchPlan& plan) const;
  // Backward of dispatch: d_rows [M, D] -> dx [T, D] (new; dx[t] = sum over t's kept
  // assignments of their rows' gradients).
  StatusOr<Tensor> dispatch_backward(const Tensor& d_rows, const DispatchPlan& plan) const;

 private:
  // Moves `in` ([S or M, ...] rows) to the peers under `exchange` (or its transpose): an
  // equal-chunk all_to_all in capacity mode, all_to_all_v in dropless mode, the identity at one
  // rank.
  StatusOr<Tensor> exchange(const Tensor& in, const comm::AllToAllPlan& exchange,
                            bool capacity_mode) const;

  MoeLayerConfig cfg_;
  Context& ctx_;
  comm::Communicator* comm_;
  std::set<int64_t> agreed_tokens_;
};

}  // namespace moe
