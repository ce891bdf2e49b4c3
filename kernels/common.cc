#include "kernels/common.h"

namespace moe::kernels {

Status check_context(const Context& ctx, const char* op, bool has_cuda_kernel) {
  if (ctx.device().is_host()) return Status::OK();
#if defined(MOE_WITH_CUDA)
  if (ctx.device().is_cuda() && has_cuda_kernel) return Status::OK();
  return unimplemented_error(op, ": no CUDA kernel for this op yet (", ctx.device().to_string(),
                             "); run it on the CPU");
#else
  (void)has_cuda_kernel;
  return unimplemented_error(op, ": no kernel for ", ctx.device().to_string(),
                             " in this build (configure with MOE_WITH_CUDA=ON)");
#endif
}

Status check_device(const Context& ctx, const char* op, const char* name, const TensorView& t) {
  if (t.device() != ctx.device()) {
    return invalid_argument_error(op, ": ", name, " is on ", t.device().to_string(),
                                  ", the context on ", ctx.device().to_string());
  }
  return Status::OK();
}

Status check_act(const Context& ctx, const char* op, const char* name, const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_device(ctx, op, name, t));
  if (!dtype_is_floating(t.dtype())) {
    return invalid_argument_error(op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                                  ", expected f32, f64 or bf16");
  }
  return Status::OK();
}

Status check_full(const Context& ctx, const char* op, const char* name, const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_device(ctx, op, name, t));
  if (t.dtype() != DType::kF32 && t.dtype() != DType::kF64) {
    return invalid_argument_error(op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                                  ", expected f32 or f64");
  }
  return Status::OK();
}

Status check_dtype(const char* op, const char* name, const TensorView& t, DType dtype) {
  if (t.dtype() != dtype) {
    return invalid_argument_error(op, ": ", name, " has dtype ", dtype_name(t.dtype()),
                                  ", expected ", dtype_name(dtype));
  }
  return Status::OK();
}

Status check_shape(const char* op, const char* name, const TensorView& t, const Shape& shape) {
  if (t.shape() != shape) {
    return invalid_argument_error(op, ": ", name, " has shape ", t.shape().to_string(),
                                  ", expected ", shape.to_string());
  }
  return Status::OK();
}

Status check_tensor(const Context& ctx, const char* op, const char* name, const TensorView& t,
                    DType dtype, const Shape& shape) {
  MOE_RETURN_IF_ERROR(check_device(ctx, op, name, t));
  MOE_RETURN_IF_ERROR(check_dtype(op, name, t, dtype));
  return check_shape(op, name, t, shape);
}

Status check_same_dtype(const char* op, const TensorView& a, const char* name_b,
                        const TensorView& b) {
  if (a.dtype() != b.dtype()) {
    return invalid_argument_error(op, ": ", name_b, " has dtype ", dtype_name(b.dtype()),
                                  ", expected ", dtype_name(a.dtype()));
  }
  if (a.device() != b.device()) {
    return invalid_argument_error(op, ": ", name_b, " is on ", b.device().to_string(),
                                  ", expected ", a.device().to_string());
  }
  return Status::OK();
}

Status check_compute(const char* op, const char* name, const TensorView& t, DType act,
                     const Shape& shape) {
  MOE_RETURN_IF_ERROR(check_dtype(op, name, t, compute_dtype(act)));
  return check_shape(op, name, t, shape);
}

Status check_like(const char* op, const TensorView& like, const char* name, const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_same_dtype(op, like, name, t));
  return check_shape(op, name, t, like.shape());
}

Status unsupported_device(const char* op, const TensorView& t) {
  return unimplemented_error(op, ": no implementation for ", t.to_string(),
                             " in this build (the CUDA kernels are not built)");
}

StatusOr<DeviceStep> device_step(const Context& ctx, const TensorView& step_keys) {
  MOE_RETURN_IF_ERROR(
      check_tensor(ctx, "device_step", "step_keys", step_keys, DType::kI64, Shape{2}));
  DeviceAccessScope device_side;  // the address, for kernel arguments
  return DeviceStep{step_keys.data<int64_t>()};
}

}  // namespace moe::kernels
