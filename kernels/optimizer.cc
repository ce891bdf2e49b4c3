#include "kernels/optimizer.h"

#include "kernels/common.h"
#include "kernels/cpu/optimizer_ref.h"
#include "kernels/cuda/optimizer.h"

namespace moe::kernels {

Status adamw_step(Context& ctx, const AdamWArgs& a, const TensorView& param, const TensorView& grad,
                  const TensorView& m, const TensorView& v) {
  constexpr const char* kOp = "adamw_step";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_full(ctx, kOp, "param", param));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "grad", grad));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "m", m));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "v", v));
  if (a.step < 1) return invalid_argument_error(kOp, ": step = ", a.step, " must be >= 1");
  if (!(a.beta1 >= 0 && a.beta1 < 1) || !(a.beta2 >= 0 && a.beta2 < 1)) {
    return invalid_argument_error(kOp, ": beta1 = ", a.beta1, " and beta2 = ", a.beta2,
                                  " must be in [0, 1)");
  }
  if (!(a.eps > 0)) return invalid_argument_error(kOp, ": eps = ", a.eps, " must be > 0");
  if (!(a.grad_scale > 0)) {
    return invalid_argument_error(kOp, ": grad_scale = ", a.grad_scale, " must be > 0");
  }
  MOE_ON_CUDA(ctx, cuda::adamw_step(ctx, a, param, grad, m, v));
  return dispatch_full(kOp, param, [&](auto tag) {
    using T = decltype(tag);
    ref::adamw_step<T>(a, param.numel(), param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>());
  });
}

Status sgd_step(Context& ctx, const SgdArgs& a, const TensorView& param, const TensorView& grad,
                const TensorView& buf) {
  constexpr const char* kOp = "sgd_step";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_full(ctx, kOp, "param", param));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "grad", grad));
  if (a.momentum < 0) {
    return invalid_argument_error(kOp, ": momentum = ", a.momentum, " must be >= 0");
  }
  if (!(a.grad_scale > 0)) {
    return invalid_argument_error(kOp, ": grad_scale = ", a.grad_scale, " must be > 0");
  }
  if (a.momentum > 0) MOE_RETURN_IF_ERROR(check_like(kOp, param, "buf", buf));
  MOE_ON_CUDA(ctx, cuda::sgd_step(ctx, a, param, grad, buf));
  return dispatch_full(kOp, param, [&](auto tag) {
    using T = decltype(tag);
    ref::sgd_step<T>(a, param.numel(), param.data<T>(), grad.data<T>(),
                     a.momentum > 0 ? buf.data<T>() : nullptr);
  });
}

Status sum_of_squares(Context& ctx, const std::vector<TensorView>& views, const TensorView& out) {
  constexpr const char* kOp = "sum_of_squares";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "out", out, DType::kF64, Shape{1}));
  for (const TensorView& t : views) MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "views", t));
  MOE_ON_CUDA(ctx, cuda::sum_of_squares(ctx, views, out));
  double total = out.data<double>()[0];
  for (const TensorView& t : views) {
    MOE_RETURN_IF_ERROR(dispatch_float(kOp, t, [&](auto tag) {
      using T = decltype(tag);
      ref::accumulate_sum_of_squares<T>(t.data<T>(), t.numel(), &total);
    }));
  }
  out.data<double>()[0] = total;
  return Status::OK();
}

bool sum_of_squares_by_blocks(const Context& ctx) { return !ctx.device().is_cuda(); }

Status sum_of_squares_blocks(Context& ctx, const TensorView& x, const TensorView& out) {
  constexpr const char* kOp = "sum_of_squares_blocks";
  MOE_KERNEL_ENTRY(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  const int64_t blocks = (x.numel() + kSquaresBlock - 1) / kSquaresBlock;
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "out", out, DType::kF64, Shape{blocks}));
  return dispatch_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::sum_of_squares_blocks<T>(x.data<T>(), x.numel(), out.data<double>());
  });
}

Status sum_in_order(Context& ctx, const TensorView& x, const TensorView& out) {
  constexpr const char* kOp = "sum_in_order";
  MOE_KERNEL_ENTRY(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "x", x, DType::kF64, Shape{x.numel()}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "out", out, DType::kF64, Shape{1}));
  ref::accumulate_in_order(x.data<double>(), x.numel(), out.data<double>());
  return Status::OK();
}

}  // namespace moe::kernels
