#include "kernels/load_balance.h"

#include <cmath>

#include "kernels/common.h"
#include "kernels/cpu/load_balance_ref.h"
#include "kernels/cuda/load_balance.h"

namespace moe::kernels {

Status score_bias_update(Context& ctx, const TensorView& load, double rate,
                         const TensorView& bias) {
  constexpr const char* kOp = "score_bias_update";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "load", load));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "load", load, DType::kF64));
  if (load.ndim() != 1 || load.numel() < 1) {
    return invalid_argument_error(kOp, ": load must be [E], got ", load.to_string());
  }
  MOE_RETURN_IF_ERROR(check_full(ctx, kOp, "bias", bias));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "bias", bias, load.shape()));
  if (!(std::isfinite(rate) && rate >= 0)) {
    return invalid_argument_error(kOp, ": rate = ", rate, " must be finite and >= 0");
  }
  MOE_ON_CUDA(ctx, cuda::score_bias_update(ctx, load, rate, bias));
  return dispatch_full(kOp, bias, [&](auto tag) {
    using T = decltype(tag);
    ref::score_bias_update<T>(load.data<double>(), load.numel(), rate, bias.data<T>());
  });
}

}  // namespace moe::kernels
