#include "core/layers/init.h"

#include "kernels/common.h"

namespace moe {

Status init_normal(const TensorView& t, double stddev, CounterRng rng, uint64_t first_index) {
  constexpr const char* kOp = "init_normal";
  MOE_RETURN_IF_ERROR(kernels::check_host_float(kOp, "t", t));
  if (!(stddev >= 0)) return invalid_argument_error(kOp, ": stddev = ", stddev, " must be >= 0");
  return kernels::dispatch_host_float(kOp, t, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float z = rng.normal(first_index + static_cast<uint64_t>(i));
      p[i] = static_cast<T>(stddev * static_cast<double>(z));
    }
  });
}

Status init_constant(const TensorView& t, double value) {
  constexpr const char* kOp = "init_constant";
  MOE_RETURN_IF_ERROR(kernels::check_host_float(kOp, "t", t));
  return kernels::dispatch_host_float(kOp, t, [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<T>(value);
  });
}

}  // namespace moe
