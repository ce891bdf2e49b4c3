#include "kernels/elementwise.h"

#include <cstring>

#include "kernels/common.h"
#include "kernels/cpu/elementwise_ref.h"
#include "kernels/cuda/elementwise.h"

namespace moe::kernels {
namespace {

// Calls f(X{}, Y{}) for two float views.
template <typename Fn>
Status dispatch_pair(const char* op, const TensorView& x, const TensorView& y, Fn&& f) {
  return dispatch_float(op, x, [&](auto xt) {
    Status s = dispatch_float(op, y, [&](auto yt) { f(xt, yt); });
    (void)s;  // y's dtype was checked by the caller
  });
}

Status check_scalar_slots(const Context& ctx, const char* op, const TensorView& out) {
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "out", out));
  return check_dtype(op, "out", out, DType::kF64);
}

}  // namespace

Status add(Context& ctx, const TensorView& a, const TensorView& b, const TensorView& out) {
  constexpr const char* kOp = "add";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "a", a));
  MOE_RETURN_IF_ERROR(check_like(kOp, a, "b", b));
  MOE_RETURN_IF_ERROR(check_like(kOp, a, "out", out));
  MOE_ON_CUDA(ctx, cuda::add(ctx, a, b, out));
  return dispatch_float(kOp, a, [&](auto tag) {
    using T = decltype(tag);
    ref::add<T>(a.data<T>(), b.data<T>(), a.numel(), out.data<T>());
  });
}

Status axpy(Context& ctx, double alpha, const TensorView& x, const TensorView& y) {
  constexpr const char* kOp = "axpy";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "y", y));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "y", y, x.shape()));
  MOE_ON_CUDA(ctx, cuda::axpy(ctx, alpha, x, y));
  return dispatch_pair(kOp, x, y, [&](auto xt, auto yt) {
    using X = decltype(xt);
    using Y = decltype(yt);
    ref::axpy<X, Y>(alpha, x.data<X>(), x.numel(), y.data<Y>());
  });
}

Status scale(Context& ctx, const TensorView& x, double alpha) {
  constexpr const char* kOp = "scale";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  MOE_ON_CUDA(ctx, cuda::scale(ctx, x, alpha));
  return dispatch_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::scale<T>(alpha, x.numel(), x.data<T>());
  });
}

Status convert(Context& ctx, const TensorView& src, const TensorView& dst) {
  constexpr const char* kOp = "convert";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "src", src));
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "dst", dst));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "dst", dst, src.shape()));
  if (src.dtype() != dst.dtype() &&
      (!dtype_is_floating(src.dtype()) || !dtype_is_floating(dst.dtype()))) {
    return invalid_argument_error(kOp, ": no conversion from ", dtype_name(src.dtype()), " to ",
                                  dtype_name(dst.dtype()));
  }
  MOE_ON_CUDA(ctx, cuda::convert(ctx, src, dst));
  if (src.dtype() == dst.dtype()) {
    if (src.nbytes() > 0) std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return Status::OK();
  }
  return dispatch_pair(kOp, src, dst, [&](auto st, auto dt) {
    using S = decltype(st);
    using D = decltype(dt);
    ref::convert<S, D>(src.data<S>(), src.numel(), dst.data<D>());
  });
}

Status copy_columns(Context& ctx, const TensorView& src, int64_t src_col, const TensorView& dst,
                    int64_t dst_col, int64_t width) {
  constexpr const char* kOp = "copy_columns";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "src", src));
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "dst", dst));
  if (src.ndim() != 2 || dst.ndim() != 2 || dst.dim(0) != src.dim(0) ||
      dst.dtype() != src.dtype()) {
    return invalid_argument_error(kOp, ": src ", src.to_string(), " and dst ", dst.to_string(),
                                  " must be matrices of one dtype with the same rows");
  }
  if (width < 0 || src_col < 0 || dst_col < 0 || src_col + width > src.dim(1) ||
      dst_col + width > dst.dim(1)) {
    return invalid_argument_error(kOp, ": columns [", src_col, ", ", src_col + width, ") of src ",
                                  src.to_string(), " to [", dst_col, ", ", dst_col + width,
                                  ") of dst ", dst.to_string(), " are out of range");
  }
  if (src.numel() > 0 && dst.same_data(src)) {
    return invalid_argument_error(kOp, ": dst must not be src");
  }
  MOE_ON_CUDA(ctx, cuda::copy_columns(ctx, src, src_col, dst, dst_col, width));
  return dispatch_float(kOp, src, [&](auto tag) {
    using T = decltype(tag);
    ref::copy_columns<T>(src.data<T>(), src.dim(1), src_col, dst.data<T>(), dst.dim(1), dst_col,
                         src.dim(0), width);
  });
}

Status count_nonfinite(Context& ctx, const TensorView& x, const TensorView& out) {
  constexpr const char* kOp = "count_nonfinite";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_scalar_slots(ctx, kOp, out));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "out", out, Shape{1}));
  MOE_ON_CUDA(ctx, cuda::count_nonfinite(ctx, x, out));
  return dispatch_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    out.data<double>()[0] += static_cast<double>(ref::count_nonfinite<T>(x.data<T>(), x.numel()));
  });
}

Status add_scalar(Context& ctx, const TensorView& out, double value) {
  constexpr const char* kOp = "add_scalar";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_scalar_slots(ctx, kOp, out));
  MOE_ON_CUDA(ctx, cuda::add_scalar(ctx, out, value));
  double* p = out.data<double>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] += value;
  return Status::OK();
}

}  // namespace moe::kernels
