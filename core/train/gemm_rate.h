// The rate a device reaches on a large matrix product, measured: the denominator of the MFU
// (model FLOPs utilisation) each progress line shows on a GPU. Square products of `n` in the
// run's activation dtype (bf16 under BF16: the tensor cores), through the same gemm entry point
// the model uses, timed after a warm-up between two waits; a rate the device really reaches
// rather than a datasheet peak.
#pragma once

#include "base/context.h"

namespace moe {

// FLOP/s of `ctx`'s gemm on [n, n] x [n, n] in `dtype` (2 n^3 FLOPs per product), the best of
// `repeats` timed products after one warm-up. Allocates three n x n tensors (freed on return).
StatusOr<double> measure_gemm_rate(Context& ctx, DType dtype, int64_t n = 4096, int repeats = 10);

}  // namespace moe
