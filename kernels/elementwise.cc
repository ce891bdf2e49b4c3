#include "kernels/elementwise.h"

#include <cstring>

#include "kernels/common.h"
#include "kernels/reference/elementwise_ref.h"

namespace moe::kernels {
namespace {

Status check_like(const char* op, const TensorView& ref, const char* name, const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_same_dtype(op, ref, name, t));
  return check_shape(op, name, t, ref.shape());
}

}  // namespace

Status add(const TensorView& a, const TensorView& b, const TensorView& out, Stream stream) {
  constexpr const char* kOp = "add";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "a", a));
  MOE_RETURN_IF_ERROR(check_like(kOp, a, "b", b));
  MOE_RETURN_IF_ERROR(check_like(kOp, a, "out", out));
  return dispatch_host_float(kOp, a, [&](auto tag) {
    using T = decltype(tag);
    ref::add<T>(a.data<T>(), b.data<T>(), a.numel(), out.data<T>());
  });
}

Status axpy(double alpha, const TensorView& x, const TensorView& y, Stream stream) {
  constexpr const char* kOp = "axpy";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "y", y));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::axpy<T>(alpha, x.data<T>(), x.numel(), y.data<T>());
  });
}

Status scale_inplace(const TensorView& x, double alpha, Stream stream) {
  constexpr const char* kOp = "scale_inplace";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::scale<T>(alpha, x.numel(), x.data<T>());
  });
}

Status copy(const TensorView& src, const TensorView& dst, Stream stream) {
  constexpr const char* kOp = "copy";
  if (!src.is_host()) return unsupported_device(kOp, src);
  if (!dst.is_host()) return unsupported_device(kOp, dst);
  MOE_RETURN_IF_ERROR(check_like(kOp, src, "dst", dst));
  if (src.nbytes() > 0) std::memcpy(dst.raw(), src.raw(), src.nbytes());
  return Status::OK();
}

StatusOr<bool> all_finite(const TensorView& x) {
  constexpr const char* kOp = "all_finite";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  bool finite = true;
  MOE_RETURN_IF_ERROR(dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    finite = ref::all_finite<T>(x.data<T>(), x.numel());
  }));
  return finite;
}

}  // namespace moe::kernels
