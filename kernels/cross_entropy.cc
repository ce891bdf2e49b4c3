#include "kernels/cross_entropy.h"

#include <cmath>
#include <limits>

#include "kernels/common.h"

namespace moe::kernels {
namespace {

Status check_args(const char* op, const TensorView& logits, const TensorView& targets) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "logits", logits));
  if (logits.ndim() != 2) return invalid_argument_error(op, ": logits must be [N, V]");
  MOE_RETURN_IF_ERROR(check_dtype(op, "targets", targets, DType::kI32));
  MOE_RETURN_IF_ERROR(check_shape(op, "targets", targets, Shape{logits.dim(0)}));
  const int32_t* t = targets.data<int32_t>();
  for (int64_t n = 0; n < targets.numel(); ++n) {
    if (t[n] < -1 || t[n] >= logits.dim(1)) {
      return invalid_argument_error(op, ": target ", t[n], " at row ", n, " is outside [-1, ",
                                    logits.dim(1), ")");
    }
  }
  return Status::OK();
}

// logsumexp of a row: the exponentials in the working precision (expf for f32: this loop runs over
// the whole vocabulary for every token), accumulated in double.
template <typename T>
double row_lse(const T* row, int64_t v) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < v; ++j) mx = std::max(mx, row[j]);
  double s = 0;
  for (int64_t j = 0; j < v; ++j) s += std::exp(row[j] - mx);
  return static_cast<double>(mx) + std::log(s);
}

}  // namespace

StatusOr<CrossEntropyResult> cross_entropy_forward(const TensorView& logits,
                                                   const TensorView& targets,
                                                   const TensorView& lse) {
  constexpr const char* kOp = "cross_entropy_forward";
  MOE_RETURN_IF_ERROR(check_args(kOp, logits, targets));
  const bool keep = lse.numel() > 0;
  if (keep) {
    MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "lse", lse));
    MOE_RETURN_IF_ERROR(check_shape(kOp, "lse", lse, Shape{logits.dim(0)}));
  }
  CrossEntropyResult r;
  MOE_RETURN_IF_ERROR(dispatch_host_float(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = logits.dim(0), v = logits.dim(1);
    const int32_t* t = targets.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (t[i] < 0) continue;
      const T* row = logits.data<T>() + i * v;
      const double l = row_lse(row, v);
      if (keep) lse.data<T>()[i] = static_cast<T>(l);
      r.loss_sum += l - static_cast<double>(row[t[i]]);
      ++r.count;
    }
  }));
  return r;
}

Status cross_entropy_backward(const TensorView& logits, const TensorView& targets,
                              const TensorView& lse, double scale, const TensorView& d_logits,
                              Stream stream) {
  constexpr const char* kOp = "cross_entropy_backward";
  MOE_RETURN_IF_ERROR(check_args(kOp, logits, targets));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "d_logits", d_logits));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_logits", d_logits, logits.shape()));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "lse", lse));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "lse", lse, Shape{logits.dim(0)}));
  return dispatch_host_float(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = logits.dim(0), v = logits.dim(1);
    const int32_t* t = targets.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      const T* row = logits.data<T>() + i * v;
      T* d = d_logits.data<T>() + i * v;
      if (t[i] < 0) {
        for (int64_t j = 0; j < v; ++j) d[j] = T(0);
        continue;
      }
      const T l = lse.data<T>()[i];
      const T s = static_cast<T>(scale);
      for (int64_t j = 0; j < v; ++j) d[j] = s * std::exp(row[j] - l);
      d[t[i]] -= s;
    }
  });
}

}  // namespace moe::kernels
