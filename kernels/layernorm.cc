#include "kernels/layernorm.h"

#include "kernels/common.h"
#include "kernels/cpu/layernorm_ref.h"
#include "kernels/cuda/layernorm.h"

namespace moe::kernels {
namespace {

// x [N, D] act; gamma [D], mean and rstd [N] of x's compute dtype.
Status check_common(const Context& ctx, const char* op, const TensorView& x,
                    const TensorView& gamma, const TensorView& mean, const TensorView& rstd) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, "x", x));
  if (x.ndim() != 2) return invalid_argument_error(op, ": x must be [N, D], got ", x.to_string());
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "gamma", gamma));
  MOE_RETURN_IF_ERROR(check_compute(op, "gamma", gamma, x.dtype(), Shape{x.dim(1)}));
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "mean", mean));
  MOE_RETURN_IF_ERROR(check_compute(op, "mean", mean, x.dtype(), Shape{x.dim(0)}));
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "rstd", rstd));
  return check_compute(op, "rstd", rstd, x.dtype(), Shape{x.dim(0)});
}

}  // namespace

Status layernorm_forward(Context& ctx, const TensorView& x, const TensorView& gamma,
                         const TensorView& beta, double eps, const TensorView& y,
                         const TensorView& mean, const TensorView& rstd) {
  constexpr const char* kOp = "layernorm_forward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_common(ctx, kOp, x, gamma, mean, rstd));
  MOE_RETURN_IF_ERROR(check_like(kOp, gamma, "beta", beta));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "y", y));
  if (!(eps >= 0)) return invalid_argument_error(kOp, ": eps = ", eps, " must be >= 0");
  MOE_ON_CUDA(ctx, cuda::layernorm_forward(ctx, x, gamma, beta, eps, y, mean, rstd));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::layernorm_forward<A, F>(x.data<A>(), gamma.data<F>(), beta.data<F>(), x.dim(0), x.dim(1),
                                 eps, {y.data<A>(), mean.data<F>(), rstd.data<F>()});
  });
}

Status layernorm_backward(Context& ctx, const TensorView& dy, const TensorView& x,
                          const TensorView& gamma, const TensorView& mean, const TensorView& rstd,
                          const LayerNormGrads& grads) {
  const TensorView &dx = grads.dx, &dgamma = grads.dgamma, &dbeta = grads.dbeta;
  constexpr const char* kOp = "layernorm_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_common(ctx, kOp, x, gamma, mean, rstd));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dy", dy));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dx", dx));
  MOE_RETURN_IF_ERROR(check_like(kOp, gamma, "dgamma", dgamma));
  MOE_RETURN_IF_ERROR(check_like(kOp, gamma, "dbeta", dbeta));
  MOE_ON_CUDA(ctx, cuda::layernorm_backward(ctx, dy, x, gamma, mean, rstd, {dx, dgamma, dbeta}));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::layernorm_backward<A, F>(dy.data<A>(), x.data<A>(), gamma.data<F>(), mean.data<F>(),
                                  rstd.data<F>(), x.dim(0), x.dim(1),
                                  {dx.data<A>(), dgamma.data<F>(), dbeta.data<F>()});
  });
}

}  // namespace moe::kernels
