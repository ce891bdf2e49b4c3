#include "kernels/cross_entropy.h"

#include "kernels/common.h"
#include "kernels/reference/cross_entropy_ref.h"

namespace moe::kernels {
namespace {

Status check_args(const char* op, const TensorView& logits, const TensorView& targets) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "logits", logits));
  if (logits.ndim() != 2 || logits.dim(1) < 1) {
    return invalid_argument_error(op, ": logits must be [N, V] with V >= 1, got ",
                                  logits.to_string());
  }
  MOE_RETURN_IF_ERROR(check_dtype(op, "targets", targets, DType::kI32));
  MOE_RETURN_IF_ERROR(check_shape(op, "targets", targets, Shape{logits.dim(0)}));
  if (!targets.is_host()) return unsupported_device(op, targets);
  const int32_t* t = targets.data<int32_t>();
  for (int64_t n = 0; n < targets.numel(); ++n) {
    if (t[n] < -1 || t[n] >= logits.dim(1)) {
      return invalid_argument_error(op, ": targets: target ", t[n], " at row ", n,
                                    " is outside [-1, ", logits.dim(1), ")");
    }
  }
  return Status::OK();
}

// A per-row [N] tensor of logits' dtype.
Status check_rows(const char* op, const TensorView& logits, const char* name, const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_same_dtype(op, logits, name, t));
  return check_shape(op, name, t, Shape{logits.dim(0)});
}

}  // namespace

StatusOr<CrossEntropyResult> cross_entropy_forward(const TensorView& logits,
                                                   const TensorView& targets, const TensorView& lse,
                                                   const TensorView& row_loss) {
  constexpr const char* kOp = "cross_entropy_forward";
  MOE_RETURN_IF_ERROR(check_args(kOp, logits, targets));
  const bool want_lse = lse.numel() > 0, want_rows = row_loss.numel() > 0;
  if (want_lse) MOE_RETURN_IF_ERROR(check_rows(kOp, logits, "lse", lse));
  if (want_rows) MOE_RETURN_IF_ERROR(check_rows(kOp, logits, "row_loss", row_loss));
  CrossEntropyResult r;
  MOE_RETURN_IF_ERROR(dispatch_host_float(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    r.loss_sum = ref::cross_entropy_forward<T>(
        logits.data<T>(), targets.data<int32_t>(), logits.dim(0), logits.dim(1),
        want_lse ? lse.data<T>() : nullptr, want_rows ? row_loss.data<T>() : nullptr, &r.count);
  }));
  return r;
}

Status cross_entropy_backward(const TensorView& logits, const TensorView& targets,
                              const TensorView& lse, double scale, const TensorView& d_logits,
                              Stream stream) {
  constexpr const char* kOp = "cross_entropy_backward";
  MOE_RETURN_IF_ERROR(check_args(kOp, logits, targets));
  MOE_RETURN_IF_ERROR(check_rows(kOp, logits, "lse", lse));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "d_logits", d_logits));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_logits", d_logits, logits.shape()));
  return dispatch_host_float(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    ref::cross_entropy_backward<T>(logits.data<T>(), targets.data<int32_t>(), lse.data<T>(),
                                   logits.dim(0), logits.dim(1), scale, d_logits.data<T>());
  });
}

}  // namespace moe::kernels
