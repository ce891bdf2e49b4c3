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

__global__ void add_pair_sums_kernel(const double* pairs, int64_t n, double* out) {
  __shared__ double scratch[32];
  double a = 0, b = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    a += pairs[2 * i];
    b += pairs[2 * i + 1];
  }
  a = block_sum(a, scratch);
  b = block_sum(b, scratch);
  if (threadIdx.x == 0) {
    out[0] += a;
    out[1] += b;
  }
}

}  // namespace moe::kernels::cuda
