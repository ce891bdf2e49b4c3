// Row indices grouped by an int32 key on the GPU, in ascending row order within each key: a
// stable radix sort (CUB) of the (key, row) pairs. Kernels that must add rows in row order per
// key (the embedding table's gradient, the AC router's cluster statistics) walk these runs in
// parallel over keys and columns, and so keep the CPU reference's order for every element,
// which a loop over all rows on one thread per column kept only by running serially.
// Host-only: no CUDA types.
#pragma once

#include "base/context.h"

namespace moe::kernels::cuda {

struct KeyRuns {
  Tensor keys;  // [n] i32, ascending
  Tensor rows;  // [n] i32: rows[i] is the row whose key is keys[i]; equal keys in row order
};

// keys [n] i32 on ctx's device (n < 2^31). Enqueues the sort on ctx.stream(); no wait.
StatusOr<KeyRuns> sort_rows_by_key(Context& ctx, const TensorView& keys);

}  // namespace moe::kernels::cuda
