// Plain C++ MoE layout and data movement (the CPU backend); see kernels/moe_dispatch.h.
// A = float, double or bf16 (rows); F = float or double (gates, omega).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/moe_dispatch.h"

namespace moe::kernels::ref {

// Slots in the stable order; load/kept per expert; see moe_layout. capacity < 0: dropless.
void assign_capacity(const int32_t* idx, int64_t tokens, int64_t k, int64_t experts,
                     int64_t capacity, int32_t* slot, int64_t* load, int64_t* kept);

// What moe_layout writes, as raw pointers (the views of LayoutOut). S = E * C with a capacity,
// T * K dropless. All overwritten except drops, which is accumulated.
struct LayoutBuffers {
  int32_t* slot = nullptr;        // [T, K]: position in the expert's block, -1 when dropped
  int32_t* row = nullptr;         // [T, K]: the send-buffer row, -1 when dropped
  int64_t* load = nullptr;        // [E]: assignments before capacity
  int64_t* kept = nullptr;        // [E]: min(load, C)
  int32_t* send_token = nullptr;  // [S]: the token of each send row, -1 for an empty slot
  int64_t* send_key = nullptr;    // [S]: the row's dropout key, -1 when empty
  double* drops = nullptr;        // [2] or null: += dropped assignments, fully dropped tokens
};

// The layout of moe_layout for idx [tokens, k] (every entry in [0, a.num_experts), checked by the
// caller): slots (assign_capacity), then the send rows in token order.
void moe_layout(const LayoutArgs& a, const int32_t* idx, int64_t tokens, int64_t k,
                const LayoutBuffers& out);

// What moe_dedup_layout writes, as raw pointers (the views of DedupOut). All overwritten except
// stats, which is accumulated.
struct DedupBuffers {
  int32_t* uniq_token = nullptr;   // [T * min(K, R - 1)]: source token of each unique peer row
  int64_t* uniq_counts = nullptr;  // [R]: unique rows bound for each rank
  int32_t* send_uniq = nullptr;    // [S]: each send row's unique row within its rank's chunk
  double* stats = nullptr;         // [2] or null: += peer assignments, += unique peer rows
};

// The deduplicated layout of moe_dedup_layout for idx and row [tokens, k] (every expert in
// [0, E) and every row in [-1, S), checked by the caller).
void moe_dedup_layout(const DedupArgs& a, const int32_t* idx, const int32_t* row, int64_t tokens,
                      int64_t k, const DedupBuffers& out);

// filled[b] = the number of keys >= 0 in row b of keys [blocks, c].
void block_fill_counts(const int64_t* keys, int64_t blocks, int64_t c, int32_t* filled);

// dst[i, :] = src[index[i], :], or zeros where index[i] < 0; src [N, cols], index [rows],
// dst [rows, cols], elements of elem_size bytes (any dtype; every index checked by the caller).
void gather_rows(const void* src, const int32_t* index, int64_t rows, int64_t cols,
                 size_t elem_size, void* dst);

template <typename A, typename F>
void combine(const A* y, const int32_t* row, const F* gate, const F* omega, int64_t tokens,
             int64_t k, int64_t d, A* u);

// The sizes of a combine: du [tokens, d]; row, gate [tokens, k]; y, dy [y_rows, d]; omega [d].
struct CombineShape {
  int64_t tokens = 0, k = 0, d = 0, y_rows = 0;
};

// What combine_backward writes: dy [y_rows, d] and d_gate [tokens, k] (overwritten); d_omega [d]
// (accumulated; null: not computed).
template <typename A, typename F>
struct CombineBackwardOut {
  A* dy = nullptr;
  F* d_gate = nullptr;
  F* d_omega = nullptr;
};

template <typename A, typename F>
void combine_backward(const A* du, const A* y, const int32_t* row, const F* gate, const F* omega,
                      const CombineShape& shape, const CombineBackwardOut<A, F>& out);
template <typename A>
void gather_sum_rows(const A* src, const int32_t* rows, int64_t tokens, int64_t k, int64_t d,
                     A* dst);

}  // namespace moe::kernels::ref
