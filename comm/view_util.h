// comm-internal helpers on the views the backends exchange (shared by Local, MPI and NCCL).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/tensor.h"

namespace moe::comm {

// True when the byte ranges [a, a + na) and [b, b + nb) intersect (empty ranges never do).
inline bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  if (na == 0 || nb == 0) return false;
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + nb && pb < pa + na;
}

// True when `chunk` starts `index` chunks of `chunk_bytes` into `whole`: an in-place all_gather's
// input, or an in-place reduce_scatter's output (communicator.h).
inline bool is_own_chunk(const void* chunk, size_t chunk_bytes, const void* whole, int index) {
  return reinterpret_cast<uintptr_t>(chunk) ==
         reinterpret_cast<uintptr_t>(whole) + static_cast<uintptr_t>(index) * chunk_bytes;
}

// Bytes of one row (dimension 0) of a view with ndim >= 1.
inline size_t row_bytes_of(const TensorView& v) {
  size_t bytes = dtype_size(v.dtype());
  for (int i = 1; i < v.ndim(); ++i) bytes *= static_cast<size_t>(v.dim(i));
  return bytes;
}

}  // namespace moe::comm
