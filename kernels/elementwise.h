// Small elementwise ops: sums of residual branches, gradient accumulation across dtypes, scaling,
// column blocks copied between matrices, dtype conversion (working copies of master weights, fp32
// router inputs), and the device-side scalars of the step (non-finite counts, statistics
// constants). Every op is enqueued on ctx; none returns a host value.
#pragma once

#include "base/context.h"
#include "base/tensor.h"

namespace moe::kernels {

// out = a + b. a, b, out: one activation dtype and shape; out may alias a or b. Overwrites out.
Status add(Context& ctx, const TensorView& a, const TensorView& b, const TensorView& out);
// y += alpha * x, in double, rounded once to y's dtype. x, y: one shape, any float dtypes (an f32
// router gradient into a bf16 activation gradient, say). Accumulates into y.
Status axpy(Context& ctx, double alpha, const TensorView& x, const TensorView& y);
// x *= alpha, in place (any float dtype).
Status scale(Context& ctx, const TensorView& x, double alpha);
// dst = src converted between float dtypes (bf16 rounds to nearest even), or copied when the
// dtypes are equal (any dtype). One shape; no overlap. Overwrites dst.
Status convert(Context& ctx, const TensorView& src, const TensorView& dst);
// A block of columns between two row-major matrices of the same rows and float dtype:
// dst[r, dst_col + j] = src[r, src_col + j] for every row r and j < width (the other columns of
// dst are left as they are). Gathers the q and k of a packed qkv [N, 3D] into [N, D] and
// scatters them back (the per-head q/k norm). src and dst must not overlap (dst at src's
// address is refused).
Status copy_columns(Context& ctx, const TensorView& src, int64_t src_col, const TensorView& dst,
                    int64_t dst_col, int64_t width);
// out[0] += the number of NaN and infinite elements of x (any float dtype). out: f64 [1].
Status count_nonfinite(Context& ctx, const TensorView& x, const TensorView& out);
// out[i] += value for every element of out (f64): host constants into device statistics.
Status add_scalar(Context& ctx, const TensorView& out, double value);

}  // namespace moe::kernels
