// Parameter initialisation on the GPU: element i is stddev * rng.normal(first_index + i), the
// same Philox counters as the CPU (the Box-Muller transform runs in the device's float math, so
// values can differ from the CPU's in the last bit).
#include "kernels/common.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/init.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
__global__ void init_normal_kernel(T* t, int64_t n, double stddev, CounterRng rng, uint64_t first) {
  MOE_GRID_LOOP(i, n) {
    const float z = rng.normal(first + static_cast<uint64_t>(i));
    store(t, i, stddev * static_cast<double>(z));
  }
}

template <typename T>
__global__ void init_constant_kernel(T* t, int64_t n, double value) {
  MOE_GRID_LOOP(i, n) { store(t, i, value); }
}

}  // namespace

Status init_normal(Context& ctx, const TensorView& t, double stddev, CounterRng rng,
                   uint64_t first_index) {
  const int64_t n = t.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("init_normal", t, [&](auto tag) {
    using T = decltype(tag);
    init_normal_kernel<T>
        <<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(t.data<T>(), n, stddev, rng, first_index);
  }));
  return launch_status("init_normal");
}

Status init_constant(Context& ctx, const TensorView& t, double value) {
  const int64_t n = t.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("init_constant", t, [&](auto tag) {
    using T = decltype(tag);
    init_constant_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(t.data<T>(), n, value);
  }));
  return launch_status("init_constant");
}

}  // namespace moe::kernels::cuda
