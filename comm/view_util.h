// comm-internal helpers on the views the backends exchange (shared by Local, MPI and NCCL).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
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

// The argument rule of all_gather and reduce_scatter (communicator.h): `whole` (the gather's out,
// the scatter's in) holds world_size chunks of `chunk`'s dtype and size, and the two overlap only
// where `chunk` is whole's own chunk at `rank` (in place). "" when the views keep it, else what
// is wrong, naming them `chunk_name` and `whole_name`.
inline std::string chunked_args_error(const TensorView& chunk, const char* chunk_name,
                                      const TensorView& whole, const char* whole_name,
                                      int world_size, int rank) {
  if (chunk.dtype() != whole.dtype() || whole.numel() != chunk.numel() * world_size ||
      !chunk.defined() || !whole.defined()) {
    return str_cat(whole_name, " ", whole.to_string(), " must hold world_size ", world_size, " x ",
                   chunk_name, " ", chunk.to_string());
  }
  if (!is_own_chunk(chunk.raw(), chunk.nbytes(), whole.raw(), rank) &&
      overlaps(chunk.raw(), chunk.nbytes(), whole.raw(), whole.nbytes())) {
    return str_cat("in and out overlap without ", chunk_name, " being ", whole_name,
                   "'s own chunk");
  }
  return "";
}

// Bytes of one row (dimension 0) of a view with ndim >= 1.
inline size_t row_bytes_of(const TensorView& v) {
  size_t bytes = dtype_size(v.dtype());
  for (int i = 1; i < v.ndim(); ++i) bytes *= static_cast<size_t>(v.dim(i));
  return bytes;
}

}  // namespace moe::comm
