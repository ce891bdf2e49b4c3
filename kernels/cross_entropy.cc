#include "kernels/cross_entropy.h"

#include "kernels/common.h"
#include "kernels/cpu/cross_entropy_ref.h"
#include "kernels/cuda/cross_entropy.h"

namespace moe::kernels {
namespace {

Status check_args(const Context& ctx, const char* op, const TensorView& logits,
                  const TensorView& targets) {
  MOE_RETURN_IF_ERROR(check_full(ctx, op, "logits", logits));
  if (logits.ndim() != 2 || logits.dim(1) < 1) {
    return invalid_argument_error(op, ": logits must be [N, V] with V >= 1, got ",
                                  logits.to_string());
  }
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "targets", targets));
  MOE_RETURN_IF_ERROR(check_dtype(op, "targets", targets, DType::kI32));
  return check_shape(op, "targets", targets, Shape{logits.dim(0)});
}

// Inside the kernel: every target in [-1, V).
Status check_targets(const char* op, const TensorView& targets, int64_t vocab) {
  const int32_t* t = targets.data<int32_t>();
  for (int64_t n = 0; n < targets.numel(); ++n) {
    if (t[n] < -1 || t[n] >= vocab) {
      return invalid_argument_error(op, ": targets: target ", t[n], " at row ", n,
                                    " is outside [-1, ", vocab, ")");
    }
  }
  return Status::OK();
}

}  // namespace

Status cross_entropy_forward(Context& ctx, const TensorView& logits, const TensorView& targets,
                             const TensorView& lse, const TensorView& sums,
                             const TensorView& row_loss) {
  constexpr const char* kOp = "cross_entropy_forward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_args(ctx, kOp, logits, targets));
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "lse", lse));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "lse", lse));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "lse", lse, Shape{logits.dim(0)}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "sums", sums, DType::kF64, Shape{2}));
  const bool want_rows = row_loss.numel() > 0;
  if (want_rows) {
    MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "row_loss", row_loss));
    MOE_RETURN_IF_ERROR(check_shape(kOp, "row_loss", row_loss, Shape{logits.dim(0)}));
  }
  MOE_ON_CUDA(ctx, cuda::cross_entropy_forward(ctx, logits, targets, lse, sums, row_loss));
  MOE_RETURN_IF_ERROR(check_targets(kOp, targets, logits.dim(1)));
  return dispatch_full(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    int64_t count = 0;
    const double loss = ref::cross_entropy_forward<T>(
        logits.data<T>(), targets.data<int32_t>(), logits.dim(0), logits.dim(1), lse.data<T>(),
        want_rows ? row_loss.data<T>() : nullptr, &count);
    sums.data<double>()[0] += loss;
    sums.data<double>()[1] += static_cast<double>(count);
  });
}

Status cross_entropy_backward(Context& ctx, const TensorView& logits, const TensorView& targets,
                              const TensorView& lse, double scale, const TensorView& d_logits) {
  constexpr const char* kOp = "cross_entropy_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_args(ctx, kOp, logits, targets));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "lse", lse));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "lse", lse, Shape{logits.dim(0)}));
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "d_logits", d_logits));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_logits", d_logits, logits.shape()));
  if (compute_dtype(d_logits.dtype()) != logits.dtype()) {
    return invalid_argument_error(kOp, ": d_logits has dtype ", dtype_name(d_logits.dtype()),
                                  " for ", dtype_name(logits.dtype()), " logits");
  }
  MOE_ON_CUDA(ctx, cuda::cross_entropy_backward(ctx, logits, targets, lse, scale, d_logits));
  MOE_RETURN_IF_ERROR(check_targets(kOp, targets, logits.dim(1)));
  return dispatch_act(kOp, d_logits, [&](auto dt, auto ft) {
    using D = decltype(dt);
    using F = decltype(ft);
    ref::cross_entropy_backward<F, D>(logits.data<F>(), targets.data<int32_t>(), lse.data<F>(),
                                      logits.dim(0), logits.dim(1), scale, d_logits.data<D>());
  });
}

}  // namespace moe::kernels
