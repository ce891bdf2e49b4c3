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

template <typename T>
double row_lse(const T* row, int64_t v) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < v; ++j) mx = std::max(mx, static_cast<double>(row[j]));
  double s = 0;
  for (int64_t j = 0; j < v; ++j) s += std::exp(static_cast<double>(row[j]) - mx);
  return mx + std::log(s);
}

}  // namespace

StatusOr<CrossEntropyResult> cross_entropy_forward(const TensorView& logits,
                                                   const TensorView& targets) {
  constexpr const char* kOp = "cross_entropy_forward";
  MOE_RETURN_IF_ERROR(check_args(kOp, logits, targets));
  CrossEntropyResult r;
  MOE_RETURN_IF_ERROR(dispatch_host_float(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = logits.dim(0), v = logits.dim(1);
    const int32_t* t = targets.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (t[i] < 0) continue;
      const T* row = logits.data<T>() + i * v;
      r.loss_sum += row_lse(row, v) - static_cast<double>(row[t[i]]);
      ++r.count;
    }
  }));
  return r;
}

Status cross_entropy_backward(const TensorView& logits, const TensorView& targets, double scale,
                              const TensorView& d_logits, Stream stream) {
  constexpr const char* kOp = "cross_entropy_backward";
  MOE_RETURN_IF_ERROR(check_args(kOp, logits, targets));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "d_logits", d_logits));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_logits", d_logits, logits.shape()));
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
      const double lse = row_lse(row, v);
      for (int64_t j = 0; j < v; ++j) {
        const double p = std::exp(static_cast<double>(row[j]) - lse);
        d[j] = static_cast<T>(scale * (p - (j == t[i] ? 1.0 : 0.0)));
      }
    }
  });
}

}  // namespace moe::kernels
