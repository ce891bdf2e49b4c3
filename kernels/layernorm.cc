#include "kernels/layernorm.h"

#include "kernels/common.h"
#include "kernels/reference/layernorm_ref.h"

namespace moe::kernels {
namespace {

// name has x's dtype and the given shape.
Status check_like(const char* op, const TensorView& x, const char* name, const TensorView& t,
                  const Shape& shape) {
  MOE_RETURN_IF_ERROR(check_same_dtype(op, x, name, t));
  return check_shape(op, name, t, shape);
}

Status check_common(const char* op, const TensorView& x, const TensorView& gamma,
                    const TensorView& mean, const TensorView& rstd) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "x", x));
  if (x.ndim() != 2) return invalid_argument_error(op, ": x must be [N, D], got ", x.to_string());
  MOE_RETURN_IF_ERROR(check_like(op, x, "gamma", gamma, Shape{x.dim(1)}));
  MOE_RETURN_IF_ERROR(check_like(op, x, "mean", mean, Shape{x.dim(0)}));
  return check_like(op, x, "rstd", rstd, Shape{x.dim(0)});
}

}  // namespace

Status layernorm_forward(const TensorView& x, const TensorView& gamma, const TensorView& beta,
                         double eps, const TensorView& y, const TensorView& mean,
                         const TensorView& rstd, Stream stream) {
  constexpr const char* kOp = "layernorm_forward";
  MOE_RETURN_IF_ERROR(check_common(kOp, x, gamma, mean, rstd));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "beta", beta, gamma.shape()));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "y", y, x.shape()));
  if (!(eps >= 0)) return invalid_argument_error(kOp, ": eps = ", eps, " must be >= 0");
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::layernorm_forward<T>(x.data<T>(), gamma.data<T>(), beta.data<T>(), x.dim(0), x.dim(1), eps,
                              y.data<T>(), mean.data<T>(), rstd.data<T>());
  });
}

Status layernorm_backward(const TensorView& dy, const TensorView& x, const TensorView& gamma,
                          const TensorView& mean, const TensorView& rstd, const TensorView& dx,
                          const TensorView& dgamma, const TensorView& dbeta, Stream stream) {
  constexpr const char* kOp = "layernorm_backward";
  MOE_RETURN_IF_ERROR(check_common(kOp, x, gamma, mean, rstd));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dy", dy, x.shape()));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dx", dx, x.shape()));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dgamma", dgamma, gamma.shape()));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dbeta", dbeta, gamma.shape()));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::layernorm_backward<T>(dy.data<T>(), x.data<T>(), gamma.data<T>(), mean.data<T>(),
                               rstd.data<T>(), x.dim(0), x.dim(1), dx.data<T>(), dgamma.data<T>(),
                               dbeta.data<T>());
  });
}

}  // namespace moe::kernels
