#include "kernels/cpu/chunked_sum.h"
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

namespace {

// out[r * runs + j] = run j of row r of x [rows, n] (ref::run_sum of at most kSumChunk terms).
__global__ void run_sums_kernel(const double* x, int64_t rows, int64_t n, int64_t runs,
                                double* out) {
  MOE_GRID_LOOP(i, rows * runs) {
    const int64_t r = i / runs, begin = (i % runs) * ref::kSumChunk;
    const int64_t len = n - begin < ref::kSumChunk ? n - begin : ref::kSumChunk;
    out[i] = ref::run_sum(x + r * n + begin, len);
  }
}

}  // namespace

Status chunked_row_sums(Context& ctx, const double* x, int64_t rows, int64_t n, double* out) {
  if (rows == 0) return Status::OK();
  cudaStream_t s = stream_of(ctx);
  Tensor level[2];
  int which = 0;
  const double* in = x;
  while (n > ref::kSumChunk) {  // ref::chunked_sum's levels
    const int64_t runs = ref::sum_runs(n);
    MOE_ASSIGN_OR_RETURN(level[which], ctx.empty({rows * runs}, DType::kF64));
    run_sums_kernel<<<grid_for(rows * runs), kThreads, 0, s>>>(in, rows, n, runs,
                                                               level[which].data<double>());
    in = level[which].data<double>();
    which ^= 1;
    n = runs;
  }
  run_sums_kernel<<<grid_for(rows), kThreads, 0, s>>>(in, rows, n, 1, out);
  return launch_status("chunked_row_sums");
}

}  // namespace moe::kernels::cuda
