// Plain C++ MoE layout and data movement (the CPU backend); see kernels/moe_dispatch.h.
// A = float, double or bf16 (rows); F = float or double (gates, omega).
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

// Slots in the stable order; load/kept per expert; see moe_layout. capacity < 0: dropless.
void assign_capacity(const int32_t* idx, int64_t tokens, int64_t k, int64_t experts,
                     int64_t capacity, int32_t* slot, int64_t* load, int64_t* kept);

template <typename A, typename F>
void combine(const A* y, const int32_t* row, const F* gate, const F* omega, int64_t tokens,
             int64_t k, int64_t d, A* u);
template <typename A, typename F>
void combine_backward(const A* du, const A* y, const int32_t* row, const F* gate, const F* omega,
                      int64_t tokens, int64_t k, int64_t d, int64_t y_rows, A* dy, F* d_gate,
                      F* d_omega);
template <typename A>
void gather_sum_rows(const A* src, const int32_t* rows, int64_t tokens, int64_t k, int64_t d,
                     A* dst);

}  // namespace moe::kernels::ref
