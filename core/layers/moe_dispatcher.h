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
// the host (unless the dispatch deduplicates, below); the padded blocks' filled prefixes are
// counted on the device from the exchanged keys. Every rank of the group must use one C, i.e. one
// T: the first forward at a new token count checks this (a host-side collective, agree_tokens()).
// Dropless mode: the per-expert counts are exchanged on the device and read back once (the
// layer's one synchronisation) to size the receive buffer and the all-to-all-v.
//
// Forward: x -gather-> send -exchange-> recv -> experts -> recv -exchange back-> send -> combine.
// The dispatch gathers the rows for this rank's own experts straight into the receive buffer, and
// its exchange moves only the peers' rows (AllToAllPlan::without).
// Deduplicated dispatch (cfg.max_ep_ranks > 0 and R > 1; node-limited routing bounds the ranks a
// token reaches, and this bounds the bytes): a token sends its row once to each peer rank holding
// one or more of its experts, not once per expert. The plan lists the unique (token, peer rank)
// pairs (kernels::moe_dedup_layout), exchanges their counts with the dropless counts (and reads
// them back with them: in capacity mode this is the layer's one synchronisation), and sends each
// send row's index within its rank's unique rows along with the keys; the receiver expands the
// unique rows into its expert blocks with a row gather (padding rows stay zero). The expert rows
// are exactly those of the plain dispatch (the same rows copied), so everything after it is
// bit-identical; the combine and both backwards do not change (the dispatch backward still sums
// each token's per-assignment gradients at home, in choice order).
// Gathers into buffers larger than the caches use streaming stores on the CPU (row_copy.h).
// Backward runs the same maps the other way; the dispatch backward is a per-token gather-sum.
// Every map is a row gather: deterministic, no atomics.
#pragma once

#include <set>
#include <vector>

#include "base/context.h"
#include "base/rng.h"
#include "base/tensor.h"
#include "comm/communicator.h"
#include "kernels/expert_blocks.h"
#include "types/moe_config.h"

namespace moe {

// The deduplicated dispatch's unique rows: one per (token, peer rank) pair, in rank then token
// order (kernels::moe_dedup_layout).
struct UniqueRows {
  Tensor uniq_token;   // [T * min(K, R - 1)] i32 source token of each unique row (the first
                       //   exchange.send_total are used)
  Tensor uniq_counts;  // [R] i64 unique rows bound for each rank (0 for mine)
  Tensor send_uniq;    // [S] i32 each send row's unique row within its rank's (-1: empty, mine)
  Tensor recv_uniq;    // [M] i32 each received row's unique row within its source rank's
                       //   (-1: padding; the entries of my own rows are -1 and unused)
  comm::AllToAllPlan exchange;  // unique rows to and from each EP rank (none to or from me)
  bool active() const { return exchange.world_size() > 0; }
};

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
  UniqueRows unique;             // the deduplicated dispatch's (deduplicates(); else empty)
};

// The plan's statistics: f64 views of the layer's statistics block (accumulated; empty: not
// counted).
struct DispatchCounters {
  TensorView drops;     // [2] dropped assignments, fully dropped tokens (kernels::moe_layout)
  TensorView exchange;  // [2] rows to peers without deduplication, rows sent (moe_dedup_layout;
                        //   counted only when the dispatch deduplicates)
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

  // Whether dispatch() sends each token once per peer rank (cfg.max_ep_ranks > 0 and R > 1).
  bool deduplicates() const;

  // Builds the plan for idx [T, K] i32 (collective over the EP group). `counters` accumulate the
  // plan's statistics. `training` picks the capacity (capacity()). token_offset keys the rows'
  // dropout (global token ids), moved by a step in device memory (kernels::LayoutArgs).
  Status plan(const Tensor& idx, int64_t token_offset, const DispatchCounters& counters,
              DispatchPlan* plan, bool training = true, DeviceStep device_step = {},
              int64_t tokens_per_sequence = 0);
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
  // out [2n] i64 = [mine (n) | what each rank's `mine` holds for me]: `mine` [n] is [R, n / R],
  // chunk r for rank r (an all_to_all; a copy at one rank).
  Status exchange_counts(const Tensor& mine, const TensorView& out) const;
  // The steps of plan() after the layout, in order. plan_unique (deduplicating only): the unique
  // rows. read_counts: exchanges the counts the host must see and reads them back once, dropless
  // [kept (E) | received (E)], then, deduplicating, [unique rows sent (R) | received (R)]; empty
  // when there are none. plan_capacity or plan_dropless (given the first 2E): the exchange, the
  // blocks and the received keys. plan_unique_exchange (given the last 2R): the unique rows'
  // exchange and each received row's index among them.
  Status plan_unique(const Tensor& idx, const TensorView& counter, DispatchPlan* p);
  StatusOr<std::vector<int64_t>> read_counts(const DispatchPlan& p);
  Status plan_capacity(DispatchPlan* p);
  Status plan_dropless(const int64_t* counts, DispatchPlan* p);
  Status plan_unique_exchange(const int64_t* counts, DispatchPlan* p);
  // dispatch() when the plan deduplicates.
  StatusOr<Tensor> dispatch_unique(const Tensor& x, const DispatchPlan& plan) const;

  MoeLayerConfig cfg_;
  Context& ctx_;
  comm::Communicator* comm_;
  std::set<int64_t> agreed_tokens_;
};

}  // namespace moe
