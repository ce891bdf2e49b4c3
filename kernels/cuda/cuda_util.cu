#include "kernels/cuda/cuda_util.cuh"

namespace moe::kernels::cuda {

__global__ void finish_sum_kernel(const double* partials, int count, double* out) {
  __shared__ double scratch[32];
  double s = 0;
  // Thread t adds partials t, t + blockDim, ...: a fixed order for a fixed count.
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *out += s;
}

}  // namespace moe::kernels::cuda
