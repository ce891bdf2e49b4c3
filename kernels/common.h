// Shared argument checks and dtype dispatch for kernel entry points. Every entry point validates
// its views (device, dtype, shape) before touching data and returns kInvalidArgument naming the
// op and the argument; data-dependent checks (an index out of range) happen while the kernel runs
// and are reported the same way.
//
// Dtype roles (base/dtype.h): "act" is f32, f64 or bf16; "F" is compute_dtype(act).
// dispatch_act calls f(A{}, F{}) with (float, float), (double, double) or (bf16, float).
#pragma once

#include <string>

#include "base/context.h"
#include "base/rng.h"
#include "base/tensor.h"

namespace moe::kernels {

// An entry point's first lines: the context must be one this op runs on, and the kernel may
// touch device memory. MOE_KERNEL_ENTRY: host contexts only (the op has no CUDA kernel yet, and a
// CUDA context is refused naming it). MOE_KERNEL_ENTRY_CUDA: host or CUDA contexts; after
// validating its views the entry point hands a CUDA context to kernels/cuda/ with MOE_ON_CUDA.
// Both open the context's thread pool for parallel_for (base/thread_pool.h).
#define MOE_KERNEL_ENTRY(ctx, op)                                     \
  MOE_RETURN_IF_ERROR(::moe::kernels::check_context(ctx, op, false)); \
  ::moe::DeviceAccessScope _moe_device_scope;                         \
  ::moe::ParallelScope _moe_parallel_scope((ctx).thread_pool())
#define MOE_KERNEL_ENTRY_CUDA(ctx, op)                               \
  MOE_RETURN_IF_ERROR(::moe::kernels::check_context(ctx, op, true)); \
  ::moe::DeviceAccessScope _moe_device_scope;                        \
  ::moe::ParallelScope _moe_parallel_scope((ctx).thread_pool())
#if defined(MOE_WITH_CUDA)
#define MOE_ON_CUDA(ctx, call)                                   \
  if ((ctx).device().is_cuda()) {                                \
    const ::moe::CudaDeviceGuard _moe_on_device((ctx).device()); \
    return (call);                                               \
  }                                                              \
  static_cast<void>(0)
#else
#define MOE_ON_CUDA(ctx, call) static_cast<void>(0)
#endif

// kUnimplemented for a context the op cannot run on (a CUDA context without has_cuda_kernel, or
// in a build without CUDA).
Status check_context(const Context& ctx, const char* op, bool has_cuda_kernel);

// The view lives on ctx's device.
Status check_device(const Context& ctx, const char* op, const char* name, const TensorView& t);
// An activation view: f32, f64 or bf16 on ctx's device.
Status check_act(const Context& ctx, const char* op, const char* name, const TensorView& t);
// A full-precision view: f32 or f64 on ctx's device.
Status check_full(const Context& ctx, const char* op, const char* name, const TensorView& t);
Status check_dtype(const char* op, const char* name, const TensorView& t, DType dtype);
Status check_shape(const char* op, const char* name, const TensorView& t, const Shape& shape);
// t lives on ctx's device and has exactly this dtype and shape (index, mask and f64 sum views).
Status check_tensor(const Context& ctx, const char* op, const char* name, const TensorView& t,
                    DType dtype, const Shape& shape);
// b has a's dtype and lives on a's device.
Status check_same_dtype(const char* op, const TensorView& a, const char* name_b,
                        const TensorView& b);
// t has dtype compute_dtype(act) and the given shape.
Status check_compute(const char* op, const char* name, const TensorView& t, DType act,
                     const Shape& shape);
// t has `like`'s dtype and shape (and device).
Status check_like(const char* op, const TensorView& like, const char* name, const TensorView& t);
Status unsupported_device(const char* op, const TensorView& t);

// step_keys (i64 [2] on ctx's device: a step and its first global sequence) as a DeviceStep for
// the random streams of kernels recorded in a CUDA graph (base/rng.h): its address only; nothing
// is read on the host.
StatusOr<DeviceStep> device_step(const Context& ctx, const TensorView& step_keys);

// An optional view's typed data: nullptr when the view is empty (an absent input or output).
template <typename T>
T* data_or_null(const TensorView& t) {
  return t.numel() > 0 ? t.data<T>() : nullptr;
}

// Calls f(A{}, F{}) for an activation dtype (see above).
template <typename Fn>
Status dispatch_act(const char* op, const TensorView& t, Fn&& f) {
  switch (t.dtype()) {
    case DType::kF32:
      f(float{}, float{});
      return Status::OK();
    case DType::kF64:
      f(double{}, double{});
      return Status::OK();
    case DType::kBF16:
      f(bf16{}, float{});
      return Status::OK();
    default:
      return invalid_argument_error(op, ": dtype ", dtype_name(t.dtype()),
                                    " is not an activation dtype (f32, f64, bf16)");
  }
}

// Calls f(T{}) with T = float or double for a full-precision view.
template <typename Fn>
Status dispatch_full(const char* op, const TensorView& t, Fn&& f) {
  switch (t.dtype()) {
    case DType::kF32:
      f(float{});
      return Status::OK();
    case DType::kF64:
      f(double{});
      return Status::OK();
    default:
      return invalid_argument_error(op, ": dtype ", dtype_name(t.dtype()),
                                    " is not a full-precision dtype (f32, f64)");
  }
}

// Calls f(T{}) with T = float, double or bf16 for any float view.
template <typename Fn>
Status dispatch_float(const char* op, const TensorView& t, Fn&& f) {
  switch (t.dtype()) {
    case DType::kF32:
      f(float{});
      return Status::OK();
    case DType::kF64:
      f(double{});
      return Status::OK();
    case DType::kBF16:
      f(bf16{});
      return Status::OK();
    default:
      return invalid_argument_error(op, ": dtype ", dtype_name(t.dtype()), " is not a float dtype");
  }
}

}  // namespace moe::kernels
