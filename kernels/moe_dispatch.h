// Data movement of the MoE layer (DESIGN.md steps 3-6): the layout step that turns routing into
// capacity slots and send-buffer rows (DeepEP's layout kernel) and its per-destination-rank
// deduplication (each token sent once per peer rank), the row gathers into and out of
// the exchange buffers, and the gate-weighted combine with its backward. No atomics: every
// accumulation runs in a fixed order, so outputs are bit-reproducible.
//
// The send buffer holds one block per global expert, in expert order (rank e / E_l owns expert
// e): C rows per block in capacity mode (rows past the expert's kept count are empty), or the
// expert's load in dropless mode (blocks at the exclusive prefix sums of the loads; T*K rows in
// all, since nothing is dropped).
#pragma once

#include "base/context.h"
#include "base/rng.h"
#include "base/tensor.h"

namespace moe::kernels {

struct LayoutArgs {
  MOE_HOST_DEVICE LayoutArgs() {}
  MOE_HOST_DEVICE LayoutArgs(int64_t experts, int64_t capacity_, int64_t offset)
      : num_experts(experts), capacity(capacity_), token_offset(offset) {}

  int64_t num_experts = 0;   // E
  int64_t capacity = -1;     // C per expert, or -1 (dropless)
  int64_t token_offset = 0;  // global id of token 0 (dropout keys)
  // A step in device memory (a recorded launch, base/rng.h): token 0's id then moves by the
  // step's first sequence x tokens_per_sequence, read when the kernel runs.
  DeviceStep device_step;
  int64_t tokens_per_sequence = 0;

  MOE_HOST_DEVICE int64_t first_token() const {
    return token_offset + device_step.first_sequence() * tokens_per_sequence;
  }
};

// What moe_layout writes (the views below).
struct LayoutOut {
  TensorView slot, row, load, kept, send_token, send_key;
  TensorView drops;  // optional
};

// [in] idx [T, K] i32 (expert of each assignment, in [0, E)). Slots are assigned in a stable
// order: all first choices in token order, then all second choices, and so on.
// [out] out.slot [T, K] i32: position in the expert's block, -1 when dropped (position >= C).
// [out] row [T, K] i32: the send-buffer row, -1 when dropped.
// [out] load [E] i64: assignments before capacity; kept [E] i64: min(load, C).
// [out] send_token [S] i32: the token of each send row, -1 for an empty slot.
// [out] send_key [S] i64: the row's dropout key (global token * K + choice), -1 when empty.
//   S = E * C (capacity) or T * K (dropless).
// [in,out, optional] drops f64 [2]: += dropped assignments, += tokens with every choice dropped.
// An expert index outside [0, E) is kInvalidArgument.
Status moe_layout(Context& ctx, const LayoutArgs& args, const TensorView& idx,
                  const LayoutOut& out);

// The deduplicated dispatch's layout (MoeDispatcher with max_ep_ranks > 0): a token whose kept
// assignments reach several experts of one peer EP rank sends its row there once. R ranks own
// E_l = E / R experts each (expert e on rank e / E_l); `rank`'s own rows never leave it, so they
// are not deduplicated.
struct DedupArgs {
  int64_t num_experts = 0;  // E
  int64_t capacity = -1;    // C of the layout, or -1 (dropless): S = E * C or T * K
  int64_t ranks = 1;        // R, divides E
  int64_t rank = 0;         // this rank, in [0, R)
};

// What moe_dedup_layout writes (the views below).
struct DedupOut {
  TensorView uniq_token, uniq_counts, send_uniq;
  TensorView stats;  // optional
};

// [in] idx [T, K] i32 (expert of each assignment, in [0, E)) and row [T, K] i32 (its send-buffer
// row, -1 when dropped): moe_layout's input and output.
// The unique (token, destination rank) pairs over the kept assignments to peer ranks, ordered by
// destination rank, then token:
// [out] out.uniq_token [T * min(K, R - 1)] i32: the source token of each unique row; the first
//   sum(uniq_counts) entries are used (rank r's chunk at the exclusive prefix sum of the counts),
//   the rest are -1.
// [out] uniq_counts [R] i64: unique rows bound for each rank (0 for `rank`).
// [out] send_uniq [S] i32: for each send-buffer row, the index of its unique row within its
//   destination rank's chunk; -1 for an empty row and for every row bound for `rank`.
// [in,out, optional] stats f64 [2]: += the kept assignments to peer ranks (the rows a dispatch
//   without deduplication sends), += the unique rows (sum(uniq_counts), the rows it sends).
// An expert outside [0, E) or a row outside [-1, S) is kInvalidArgument.
Status moe_dedup_layout(Context& ctx, const DedupArgs& args, const TensorView& idx,
                        const TensorView& row, const DedupOut& out);

// filled[b] = the number of keys >= 0 in block b of keys [B, C] (i64): the rows in use of each
// block of a padded capacity receive buffer. filled: i32 [B], overwritten.
Status block_fill_counts(Context& ctx, const TensorView& keys, const TensorView& filled);

// dst[i, :] = src[index[i], :], or zeros where index[i] < 0 (empty capacity slot).
//   src [N, D]; index [M] i32; dst [M, D] (overwritten). Any dtype. An index >= N is an error.
Status gather_rows(Context& ctx, const TensorView& src, const TensorView& index,
                   const TensorView& dst);
// dst[t, :] = sum over k (in order) of src[rows[t, k], :], skipping rows[t, k] < 0: the backward
// of gathering each token's K assignments (the dispatch backward, as a gather: no scatter, no
// atomics). src [S, D] act; rows [T, K] i32; dst [T, D] act (overwritten; sums in float/double).
Status gather_sum_rows(Context& ctx, const TensorView& src, const TensorView& rows,
                       const TensorView& dst);

// u[t, :] = sum_k gate[t, k] * (omega ⊙ y[row[t, k], :]), summed in k order; rows < 0 (dropped)
// contribute nothing. y [M, D] act; row [T, K] i32; gate [T, K] F; omega [D] F or empty (all
// ones); u [T, D] act (overwritten).
Status combine(Context& ctx, const TensorView& y, const TensorView& row, const TensorView& gate,
               const TensorView& omega, const TensorView& u);
// What combine_backward writes: dy and d_gate, and d_omega (accumulated; empty: not wanted).
struct CombineGrads {
  TensorView dy, d_gate, d_omega;
};

// Backward of combine:
//   dy[row[t, k], :] = gate[t, k] * omega ⊙ du[t, :]   (act; overwritten, unreferenced rows 0)
//   d_gate[t, k] = <du[t, :], omega ⊙ y[row[t, k], :]>   (F; overwritten, 0 for dropped slots)
//   d_omega += sum_{t, k} gate[t, k] * y[row[t, k], :] ⊙ du[t, :]   (F; accumulated, if given;
//              each term rounded to F, summed in double in kernels/cpu/chunked_sum.h's order
//              over the slots, so both backends give the same bits)
Status combine_backward(Context& ctx, const TensorView& du, const TensorView& y,
                        const TensorView& row, const TensorView& gate, const TensorView& omega,
                        const CombineGrads& grads);

}  // namespace moe::kernels
