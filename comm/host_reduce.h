// Elementwise reductions over host buffers of any dtype, shared by the host backends: the Local
// backend's rank-order reduction and the MPI backend's bf16 reduction operator.
//
// Sum, max and min. f32/f64/integers combine in their own type (integers wrap modulo 2^bits);
// bf16 combines in f32. max/min of NaN inputs are unspecified.
#pragma once

#include <cstddef>
#include <vector>

#include "comm/communicator.h"

namespace moe::comm {

// dst[i] = ((srcs[0][i] op srcs[1][i]) op srcs[2][i]) ... in exactly this order, so the result
// is bit-identical run to run. bf16 accumulates across all ranks in f32 and rounds once. dst may
// alias any source. srcs holds one pointer per rank, each to n elements of dtype.
void reduce_in_rank_order(const std::vector<const void*>& srcs, DType dtype, size_t n, ReduceOp op,
                          void* dst);

// inout[i] = inout[i] op in[i] over n elements of dtype (bf16 rounds after every step).
void reduce_pair(const void* in, void* inout, size_t n, DType dtype, ReduceOp op);

}  // namespace moe::comm
