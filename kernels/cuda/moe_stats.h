// The CUDA kernels of moe_stats.cu: the router statistics' device-side sums.
// Called by the public entry points (kernels/*.cc) after they have validated every view; each
// only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/moe_stats.h"

namespace moe::kernels::cuda {

Status entropy_sum(Context& ctx, const TensorView& probs, const TensorView& out);
Status row_norm_sum(Context& ctx, const TensorView& x, const TensorView& out);
Status column_sum(Context& ctx, const TensorView& x, int64_t col, const TensorView& out);
Status accumulate_counts(Context& ctx, const TensorView& counts, const TensorView& out);
Status count_mismatches(Context& ctx, const TensorView& a, const TensorView& b,
                        const TensorView& out);
Status sparsemixer_stats(Context& ctx, const TensorView& mask, const TensorView& is_argmax,
                         const TensorView& scale, const TensorView& out);
Status ac_stats(Context& ctx, const TensorView& abs_dev, const TensorView& counts,
                const TensorView& local_counts, const TensorView& summary, const TensorView& out);

}  // namespace moe::kernels::cuda
