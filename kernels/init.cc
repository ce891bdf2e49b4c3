#include "kernels/init.h"

#include "kernels/common.h"
#include "kernels/cuda/init.h"

namespace moe::kernels {

Status init_normal(Context& ctx, const TensorView& t, double stddev, CounterRng rng,
                   uint64_t first_index) {
  constexpr const char* kOp = "init_normal";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "t", t));
  if (!(stddev >= 0)) return invalid_argument_error(kOp, ": stddev = ", stddev, " must be >= 0");
  MOE_ON_CUDA(ctx, cuda::init_normal(ctx, t, stddev, rng, first_index));
  return dispatch_float(kOp, t, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float z = rng.normal(first_index + static_cast<uint64_t>(i));
      p[i] = static_cast<T>(stddev * static_cast<double>(z));
    }
  });
}

Status init_constant(Context& ctx, const TensorView& t, double value) {
  constexpr const char* kOp = "init_constant";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "t", t));
  MOE_ON_CUDA(ctx, cuda::init_constant(ctx, t, value));
  return dispatch_float(kOp, t, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(value);
  });
}

}  // namespace moe::kernels
