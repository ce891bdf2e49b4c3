#include "kernels/optimizer.h"

#include <cmath>

#include "kernels/common.h"
#include "kernels/reference/optimizer_ref.h"

namespace moe::kernels {
namespace {

Status check_like(const char* op, const TensorView& ref, const char* name, const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_same_dtype(op, ref, name, t));
  return check_shape(op, name, t, ref.shape());
}

}  // namespace

Status adamw_step(const AdamWArgs& a, const TensorView& param, const TensorView& grad,
                  const TensorView& m, const TensorView& v, Stream stream) {
  constexpr const char* kOp = "adamw_step";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "param", param));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "grad", grad));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "m", m));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "v", v));
  if (a.step < 1) return invalid_argument_error(kOp, ": step = ", a.step, " must be >= 1");
  if (!(a.beta1 >= 0 && a.beta1 < 1) || !(a.beta2 >= 0 && a.beta2 < 1)) {
    return invalid_argument_error(kOp, ": beta1 = ", a.beta1, " and beta2 = ", a.beta2,
                                  " must be in [0, 1)");
  }
  if (!(a.eps > 0)) return invalid_argument_error(kOp, ": eps = ", a.eps, " must be > 0");
  return dispatch_host_float(kOp, param, [&](auto tag) {
    using T = decltype(tag);
    ref::adamw_step<T>(a, param.numel(), param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>());
  });
}

Status sgd_step(const SgdArgs& a, const TensorView& param, const TensorView& grad,
                const TensorView& buf, Stream stream) {
  constexpr const char* kOp = "sgd_step";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "param", param));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "grad", grad));
  if (a.momentum < 0) {
    return invalid_argument_error(kOp, ": momentum = ", a.momentum, " must be >= 0");
  }
  if (a.momentum > 0) MOE_RETURN_IF_ERROR(check_like(kOp, param, "buf", buf));
  return dispatch_host_float(kOp, param, [&](auto tag) {
    using T = decltype(tag);
    ref::sgd_step<T>(a, param.numel(), param.data<T>(), grad.data<T>(),
                     a.momentum > 0 ? buf.data<T>() : nullptr);
  });
}

StatusOr<double> sum_of_squares(const std::vector<TensorView>& views) {
  constexpr const char* kOp = "sum_of_squares";
  double total = 0;
  for (const TensorView& t : views) {
    MOE_RETURN_IF_ERROR(check_host_float(kOp, "views", t));
    MOE_RETURN_IF_ERROR(dispatch_host_float(kOp, t, [&](auto tag) {
      using T = decltype(tag);
      ref::accumulate_sum_of_squares<T>(t.data<T>(), t.numel(), &total);
    }));
  }
  return total;
}

StatusOr<double> global_l2_norm(const std::vector<TensorView>& views) {
  MOE_ASSIGN_OR_RETURN(const double sq, sum_of_squares(views));
  return std::sqrt(sq);
}

}  // namespace moe::kernels
