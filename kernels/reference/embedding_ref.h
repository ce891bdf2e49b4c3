// Plain C++ embedding lookup and its scatter-add backward (the CPU backend). Pointers are
// row-major; ids are already validated by the entry point (kernels/embedding.h). T = float or
// double.
#pragma once

#include <cstdint>

namespace moe::kernels::ref {

// out[n, :] = table[ids[n], :]. ids [N]; table [V, D]; out [N, D] (overwritten).
template <typename T>
void embedding_forward(const int32_t* ids, int64_t n, const T* table, int64_t d, T* out);

// d_table[ids[n], :] += d_out[n, :], n in increasing order (deterministic; no atomics).
template <typename T>
void embedding_backward(const int32_t* ids, int64_t n, const T* d_out, int64_t d, T* d_table);

}  // namespace moe::kernels::ref
