// Small elementwise helpers on host views of one float dtype (f32|f64): sums of residual
// branches, gradient accumulation, scaling (gradient clipping), copies, and a finiteness check.
// Arithmetic is done in double and rounded once to the tensor's dtype.
#pragma once

#include "core/base/device.h"
#include "core/base/tensor.h"

namespace moe::kernels {

// out = a + b. a, b, out: one shape and dtype; out may alias a or b. Overwrites out.
Status add(const TensorView& a, const TensorView& b, const TensorView& out, Stream stream = {});
// y += alpha * x. x, y: one shape and dtype. Accumulates into y.
Status axpy(double alpha, const TensorView& x, const TensorView& y, Stream stream = {});
// x *= alpha, in place.
Status scale_inplace(const TensorView& x, double alpha, Stream stream = {});
// dst = src (any dtype; same shape and dtype). Overwrites dst; the two must not overlap.
Status copy(const TensorView& src, const TensorView& dst, Stream stream = {});
// True when every element is finite (no NaN or infinity).
StatusOr<bool> all_finite(const TensorView& x);

}  // namespace moe::kernels
