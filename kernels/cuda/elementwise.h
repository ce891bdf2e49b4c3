// The CUDA kernels of elementwise.cu: elementwise arithmetic, column blocks, conversion and the
// non-finite count.
// Called by the public entry points (kernels/*.cc) after they have validated every view; each
// only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/elementwise.h"

namespace moe::kernels::cuda {

Status add(Context& ctx, const TensorView& a, const TensorView& b, const TensorView& out);
Status axpy(Context& ctx, double alpha, const TensorView& x, const TensorView& y);
Status scale(Context& ctx, const TensorView& x, double alpha);
Status convert(Context& ctx, const TensorView& src, const TensorView& dst);
Status copy_columns(Context& ctx, const TensorView& src, int64_t src_col, const TensorView& dst,
                    int64_t dst_col, int64_t width);
Status count_nonfinite(Context& ctx, const TensorView& x, const TensorView& out);
Status add_scalar(Context& ctx, const TensorView& out, double value);

}  // namespace moe::kernels::cuda
