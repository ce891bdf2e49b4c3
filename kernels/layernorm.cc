#include "kernels/layernorm.h"

#include "kernels/common.h"
#include "kernels/cpu/layernorm_ref.h"
#include "kernels/cuda/layernorm.h"

namespace moe::kernels {
namespace {

// x [N, D] act; gamma [D] of x's compute dtype.
Status check_x_gamma(const Context& ctx, const char* op, const TensorView& x,
                     const TensorView& gamma) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, "x", x));
  if (x.ndim() != 2) return invalid_argument_error(op, ": x must be [N, D], got ", x.to_string());
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "gamma", gamma));
  return check_compute(op, "gamma", gamma, x.dtype(), Shape{x.dim(1)});
}

// A per-row statistic (mean, rstd): [N] of x's compute dtype.
Status check_row_stat(const Context& ctx, const char* op, const char* name, const TensorView& stat,
                      const TensorView& x) {
  MOE_RETURN_IF_ERROR(check_device(ctx, op, name, stat));
  return check_compute(op, name, stat, x.dtype(), Shape{x.dim(0)});
}

// x [N, D] act; gamma [D], mean and rstd [N] of x's compute dtype.
Status check_common(const Context& ctx, const char* op, const TensorView& x,
                    const TensorView& gamma, const TensorView& mean, const TensorView& rstd) {
  MOE_RETURN_IF_ERROR(check_x_gamma(ctx, op, x, gamma));
  MOE_RETURN_IF_ERROR(check_row_stat(ctx, op, "mean", mean, x));
  return check_row_stat(ctx, op, "rstd", rstd, x);
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

Status rmsnorm_forward(Context& ctx, const TensorView& x, const TensorView& gamma, double eps,
                       const TensorView& y, const TensorView& rstd) {
  constexpr const char* kOp = "rmsnorm_forward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_x_gamma(ctx, kOp, x, gamma));
  MOE_RETURN_IF_ERROR(check_row_stat(ctx, kOp, "rstd", rstd, x));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "y", y));
  if (!(eps >= 0)) return invalid_argument_error(kOp, ": eps = ", eps, " must be >= 0");
  MOE_ON_CUDA(ctx, cuda::rmsnorm_forward(ctx, x, gamma, eps, y, rstd));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::rmsnorm_forward<A, F>(x.data<A>(), gamma.data<F>(), x.dim(0), x.dim(1), eps,
                               {y.data<A>(), rstd.data<F>()});
  });
}

Status rmsnorm_backward(Context& ctx, const TensorView& dy, const TensorView& x,
                        const TensorView& gamma, const TensorView& rstd,
                        const RmsNormGrads& grads) {
  const TensorView &dx = grads.dx, &dgamma = grads.dgamma;
  constexpr const char* kOp = "rmsnorm_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_x_gamma(ctx, kOp, x, gamma));
  MOE_RETURN_IF_ERROR(check_row_stat(ctx, kOp, "rstd", rstd, x));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dy", dy));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dx", dx));
  MOE_RETURN_IF_ERROR(check_like(kOp, gamma, "dgamma", dgamma));
  MOE_ON_CUDA(ctx, cuda::rmsnorm_backward(ctx, dy, x, gamma, rstd, {dx, dgamma}));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::rmsnorm_backward<A, F>(dy.data<A>(), x.data<A>(), gamma.data<F>(), rstd.data<F>(),
                                x.dim(0), x.dim(1), {dx.data<A>(), dgamma.data<F>()});
  });
}

}  // namespace moe::kernels
