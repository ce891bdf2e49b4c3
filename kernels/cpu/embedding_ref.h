// Plain C++ embedding lookup and its scatter-add backward (the CPU backend). Pointers are
// row-major; see kernels/embedding.h. W = table dtype, A = activation, F = parameter gradients.
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

// out[n, :] = table[ids[n], :] (+ pos[n % s, :] when pos != nullptr). Returns the position of
// the first id outside [0, v) (nothing
// written), or -1.
template <typename W, typename A, typename F>
int64_t embedding_forward(const int32_t* ids, int64_t n, const W* table, int64_t v, const F* pos,
                          int64_t s, int64_t d, A* out);

// d_table[ids[n], :] += d_out[n, :]; d_pos[n % s, :] += d_out[n, :] (when d_pos != nullptr); n in
// increasing order (deterministic; no atomics). Returns the first bad position (nothing
// accumulated), or -1.
template <typename A, typename F>
int64_t embedding_backward(const int32_t* ids, int64_t n, int64_t v, const A* d_out, int64_t s,
                           int64_t d, F* d_table, F* d_pos);

}  // namespace moe::kernels::ref
