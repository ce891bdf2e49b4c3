// LayerNorm and RMSNorm on the GPU: one block per row, statistics in double (as the reference),
// reduced by a fixed tree; the parameter gradients are column sums over row chunks in a fixed
// order. Deterministic.
#include <cmath>

#include "kernels/common.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/layernorm.h"

namespace moe::kernels::cuda {
namespace {

constexpr int kRowThreads = 128;

template <typename T, typename F>
__global__ void layernorm_forward_kernel(const T* x, const F* gamma, const F* beta, int64_t d,
                                         double eps, T* y, F* mean, F* rstd) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const T* row = x + r * d;
  double s = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) s += static_cast<double>(load(row, j));
  const double m = block_sum(s, scratch) / static_cast<double>(d);
  double v = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double c = static_cast<double>(load(row, j)) - m;
    v += c * c;
  }
  const double var = block_sum(v, scratch) / static_cast<double>(d);
  const double rs = 1.0 / sqrt(var + eps);
  if (threadIdx.x == 0) {
    mean[r] = static_cast<F>(m);
    rstd[r] = static_cast<F>(rs);
  }
  // Every thread read its elements of x above; the sums' barriers order those reads before
  // these writes, so y may alias x.
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double xhat = (static_cast<double>(load(row, j)) - m) * rs;
    store(y, r * d + j, xhat * static_cast<double>(gamma[j]) + static_cast<double>(beta[j]));
  }
}

template <typename T, typename F>
__global__ void layernorm_backward_kernel(const T* dy, const T* x, const F* gamma, const F* mean,
                                          const F* rstd, int64_t d, T* dx) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const double m = mean[r], rs = rstd[r];
  double sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double g = static_cast<double>(load(dy, r * d + j)) * static_cast<double>(gamma[j]);
    const double xhat = (static_cast<double>(load(x, r * d + j)) - m) * rs;
    sg += g;
    sgx += g * xhat;
  }
  const double mean_g = block_sum(sg, scratch) / static_cast<double>(d);
  const double mean_gx = block_sum(sgx, scratch) / static_cast<double>(d);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double g = static_cast<double>(load(dy, r * d + j)) * static_cast<double>(gamma[j]);
    const double xhat = (static_cast<double>(load(x, r * d + j)) - m) * rs;
    store(dx, r * d + j, rs * (g - mean_g - xhat * mean_gx));
  }
}

// dgamma/dbeta partials over row chunks: partial[chunk, 0, j] = sum dy xhat, [chunk, 1, j] = sum
// dy. Reads dy and x: call it before the row kernel, whose dx may alias dy.
template <typename T, typename F>
__global__ void layernorm_param_partials_kernel(const T* dy, const T* x, const F* mean,
                                                const F* rstd, int64_t n, int64_t d,
                                                int64_t rows_per, double* partial) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= d) return;
  const int64_t begin = blockIdx.y * rows_per;
  const int64_t end = begin + rows_per < n ? begin + rows_per : n;
  double sg = 0, sb = 0;
  for (int64_t r = begin; r < end; ++r) {
    const double dyj = static_cast<double>(load(dy, r * d + j));
    const double xhat = (static_cast<double>(load(x, r * d + j)) - static_cast<double>(mean[r])) *
                        static_cast<double>(rstd[r]);
    sg += dyj * xhat;
    sb += dyj;
  }
  partial[(blockIdx.y * 2) * d + j] = sg;
  partial[(blockIdx.y * 2 + 1) * d + j] = sb;
}

template <typename F>
__global__ void layernorm_param_finish_kernel(const double* partial, int64_t chunks, int64_t d,
                                              F* dgamma, F* dbeta) {
  MOE_GRID_LOOP(j, d) {
    double sg = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sg += partial[(c * 2) * d + j];
      sb += partial[(c * 2 + 1) * d + j];
    }
    dgamma[j] = static_cast<F>(static_cast<double>(dgamma[j]) + sg);
    dbeta[j] = static_cast<F>(static_cast<double>(dbeta[j]) + sb);
  }
}

template <typename T, typename F>
__global__ void rmsnorm_forward_kernel(const T* x, const F* gamma, int64_t d, double eps, T* y,
                                       F* rstd) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const T* row = x + r * d;
  double s = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double v = static_cast<double>(load(row, j));
    s += v * v;
  }
  const double ms = block_sum(s, scratch) / static_cast<double>(d);
  const double rs = 1.0 / sqrt(ms + eps);
  if (threadIdx.x == 0) rstd[r] = static_cast<F>(rs);
  // Every thread read its elements of x above; the sum's barriers order those reads before
  // these writes, so y may alias x.
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double xhat = static_cast<double>(load(row, j)) * rs;
    store(y, r * d + j, xhat * static_cast<double>(gamma[j]));
  }
}

template <typename T, typename F>
__global__ void rmsnorm_backward_kernel(const T* dy, const T* x, const F* gamma, const F* rstd,
                                        int64_t d, T* dx) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const double rs = rstd[r];
  double sgx = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double g = static_cast<double>(load(dy, r * d + j)) * static_cast<double>(gamma[j]);
    sgx += g * (static_cast<double>(load(x, r * d + j)) * rs);
  }
  const double mean_gx = block_sum(sgx, scratch) / static_cast<double>(d);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double g = static_cast<double>(load(dy, r * d + j)) * static_cast<double>(gamma[j]);
    const double xhat = static_cast<double>(load(x, r * d + j)) * rs;
    store(dx, r * d + j, rs * (g - xhat * mean_gx));
  }
}

// dgamma partials over row chunks: partial[chunk, j] = sum dy xhat. Reads dy and x: call it
// before the row kernel, whose dx may alias dy.
template <typename T, typename F>
__global__ void rmsnorm_param_partials_kernel(const T* dy, const T* x, const F* rstd, int64_t n,
                                              int64_t d, int64_t rows_per, double* partial) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= d) return;
  const int64_t begin = blockIdx.y * rows_per;
  const int64_t end = begin + rows_per < n ? begin + rows_per : n;
  double sg = 0;
  for (int64_t r = begin; r < end; ++r) {
    const double xhat = static_cast<double>(load(x, r * d + j)) * static_cast<double>(rstd[r]);
    sg += static_cast<double>(load(dy, r * d + j)) * xhat;
  }
  partial[blockIdx.y * d + j] = sg;
}

template <typename F>
__global__ void rmsnorm_param_finish_kernel(const double* partial, int64_t chunks, int64_t d,
                                            F* dgamma) {
  MOE_GRID_LOOP(j, d) {
    double sg = 0;
    for (int64_t c = 0; c < chunks; ++c) sg += partial[c * d + j];
    dgamma[j] = static_cast<F>(static_cast<double>(dgamma[j]) + sg);
  }
}

}  // namespace

Status layernorm_forward(Context& ctx, const TensorView& x, const TensorView& gamma,
                         const TensorView& beta, double eps, const TensorView& y,
                         const TensorView& mean, const TensorView& rstd) {
  const int64_t n = x.dim(0), d = x.dim(1);
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("layernorm_forward", x, [&](auto at, auto ft) {
    using T = decltype(at);
    using F = decltype(ft);
    layernorm_forward_kernel<T, F><<<static_cast<unsigned>(n), kRowThreads, 0, stream_of(ctx)>>>(
        x.data<T>(), gamma.data<F>(), beta.data<F>(), d, eps, y.data<T>(), mean.data<F>(),
        rstd.data<F>());
  }));
  return launch_status("layernorm_forward");
}

Status layernorm_backward(Context& ctx, const TensorView& dy, const TensorView& x,
                          const TensorView& gamma, const TensorView& mean, const TensorView& rstd,
                          const LayerNormGrads& grads) {
  const TensorView &dx = grads.dx, &dgamma = grads.dgamma, &dbeta = grads.dbeta;
  const int64_t n = x.dim(0), d = x.dim(1);
  if (n == 0 || d == 0) return Status::OK();
  const int64_t rows_per = rows_per_chunk(n);
  const int64_t chunks = (n + rows_per - 1) / rows_per;
  MOE_ASSIGN_OR_RETURN(Tensor partial, ctx.empty({chunks, 2, d}, DType::kF64));
  MOE_RETURN_IF_ERROR(dispatch_act("layernorm_backward", x, [&](auto at, auto ft) {
    using T = decltype(at);
    using F = decltype(ft);
    const dim3 grid(static_cast<unsigned>((d + kThreads - 1) / kThreads),
                    static_cast<unsigned>(chunks));
    layernorm_param_partials_kernel<T, F><<<grid, kThreads, 0, stream_of(ctx)>>>(
        dy.data<T>(), x.data<T>(), mean.data<F>(), rstd.data<F>(), n, d, rows_per,
        partial.data<double>());
    layernorm_param_finish_kernel<F><<<grid_for(d), kThreads, 0, stream_of(ctx)>>>(
        partial.data<double>(), chunks, d, dgamma.data<F>(), dbeta.data<F>());
    layernorm_backward_kernel<T, F><<<static_cast<unsigned>(n), kRowThreads, 0, stream_of(ctx)>>>(
        dy.data<T>(), x.data<T>(), gamma.data<F>(), mean.data<F>(), rstd.data<F>(), d,
        dx.data<T>());
  }));
  return launch_status("layernorm_backward");
}

Status rmsnorm_forward(Context& ctx, const TensorView& x, const TensorView& gamma, double eps,
                       const TensorView& y, const TensorView& rstd) {
  const int64_t n = x.dim(0), d = x.dim(1);
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("rmsnorm_forward", x, [&](auto at, auto ft) {
    using T = decltype(at);
    using F = decltype(ft);
    rmsnorm_forward_kernel<T, F><<<static_cast<unsigned>(n), kRowThreads, 0, stream_of(ctx)>>>(
        x.data<T>(), gamma.data<F>(), d, eps, y.data<T>(), rstd.data<F>());
  }));
  return launch_status("rmsnorm_forward");
}

Status rmsnorm_backward(Context& ctx, const TensorView& dy, const TensorView& x,
                        const TensorView& gamma, const TensorView& rstd,
                        const RmsNormGrads& grads) {
  const TensorView &dx = grads.dx, &dgamma = grads.dgamma;
  const int64_t n = x.dim(0), d = x.dim(1);
  if (n == 0 || d == 0) return Status::OK();
  const int64_t rows_per = rows_per_chunk(n);
  const int64_t chunks = (n + rows_per - 1) / rows_per;
  MOE_ASSIGN_OR_RETURN(Tensor partial, ctx.empty({chunks, d}, DType::kF64));
  MOE_RETURN_IF_ERROR(dispatch_act("rmsnorm_backward", x, [&](auto at, auto ft) {
    using T = decltype(at);
    using F = decltype(ft);
    const dim3 grid(static_cast<unsigned>((d + kThreads - 1) / kThreads),
                    static_cast<unsigned>(chunks));
    rmsnorm_param_partials_kernel<T, F><<<grid, kThreads, 0, stream_of(ctx)>>>(
        dy.data<T>(), x.data<T>(), rstd.data<F>(), n, d, rows_per, partial.data<double>());
    rmsnorm_param_finish_kernel<F><<<grid_for(d), kThreads, 0, stream_of(ctx)>>>(
        partial.data<double>(), chunks, d, dgamma.data<F>());
    rmsnorm_backward_kernel<T, F><<<static_cast<unsigned>(n), kRowThreads, 0, stream_of(ctx)>>>(
        dy.data<T>(), x.data<T>(), gamma.data<F>(), rstd.data<F>(), d, dx.data<T>());
  }));
  return launch_status("rmsnorm_backward");
}

}  // namespace moe::kernels::cuda
