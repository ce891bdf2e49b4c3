// Shared argument checks for kernel entry points. Every entry point validates its views (device,
// dtype, shape) and returns kInvalidArgument naming the op and the argument before touching data.
#pragma once

#include <string>

#include "core/base/tensor.h"

namespace moe::kernels {

// Float tensors of one op share one dtype; the host backend supports f32 and f64.
Status check_host_float(const char* op, const char* name, const TensorView& t);
Status check_dtype(const char* op, const char* name, const TensorView& t, DType dtype);
Status check_shape(const char* op, const char* name, const TensorView& t, const Shape& shape);
Status check_same_dtype(const char* op, const TensorView& a, const char* name_b,
                        const TensorView& b);
// Operations on CUDA tensors are provided by the CUDA backend; without it this is the error.
Status unsupported_device(const char* op, const TensorView& t);

// Calls f.template operator()<T>() with T = float or double for a host float tensor.
template <typename F>
Status dispatch_host_float(const char* op, const TensorView& t, F&& f) {
  if (!t.is_host()) return unsupported_device(op, t);
  switch (t.dtype()) {
    case DType::kF32: f(float{}); return Status::OK();
    case DType::kF64: f(double{}); return Status::OK();
    default:
      return invalid_argument_error(op, ": dtype ", dtype_name(t.dtype()),
                                    " is not supported on the host (f32, f64)");
  }
}

}  // namespace moe::kernels
