// Softmax cross-entropy on the GPU: one block per row (max, then the sum of exponentials in
// double), per-row losses reduced into the device sums in a fixed order; the backward is
// elementwise from the saved logsumexp.
#include <cmath>

#include "base/fast_divmod.h"
#include "kernels/common.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/cuda_util.cuh"

namespace moe::kernels::cuda {
namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ float dev_exp(float x) { return expf(x); }
__device__ __forceinline__ double dev_exp(double x) { return exp(x); }

template <typename F>
__global__ void cross_entropy_forward_kernel(const F* logits, const int32_t* targets, int64_t v,
                                             F* lse, F* row_loss, double* loss_scratch) {
  __shared__ F fscratch[32];
  __shared__ double dscratch[32];
  const int64_t r = blockIdx.x;
  const int32_t t = targets[r];
  const bool counted = t >= 0 && t < v;  // an out-of-range target counts as ignored
  double l = 0, loss = 0;
  if (counted) {  // uniform over the block: every thread reads the same target
    const F* row = logits + r * v;
    F mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = max(mx, row[j]);
    mx = block_max(mx, fscratch);
    double s = 0;
    for (int64_t j = threadIdx.x; j < v; j += blockDim.x) s += dev_exp(row[j] - mx);
    s = block_sum(s, dscratch);
    l = static_cast<double>(mx) + log(s);
    loss = l - static_cast<double>(row[t]);
  }
  if (threadIdx.x == 0) {
    lse[r] = static_cast<F>(l);
    if (row_loss != nullptr) row_loss[r] = static_cast<F>(loss);
    loss_scratch[2 * r] = loss;
    loss_scratch[2 * r + 1] = counted ? 1.0 : 0.0;
  }
}

template <typename F, typename D>
__global__ void cross_entropy_backward_kernel(const F* logits, const int32_t* targets, const F* lse,
                                              int64_t n, FastDivmod by_v, F scale, D* d_logits) {
  const int64_t v = by_v.divisor();
  MOE_GRID_LOOP(i, n * v) {
    int64_t r, j;
    by_v.divmod(i, &r, &j);
    const int32_t t = targets[r];
    if (t < 0 || t >= v) {
      store(d_logits, i, F(0));
    } else {
      const F p = scale * dev_exp(logits[i] - lse[r]);
      store(d_logits, i, j == t ? p - scale : p);
    }
  }
}

}  // namespace

Status cross_entropy_forward(Context& ctx, const TensorView& logits, const TensorView& targets,
                             const TensorView& lse, const TensorView& sums,
                             const TensorView& row_loss) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  if (n == 0) return Status::OK();
  MOE_ASSIGN_OR_RETURN(Tensor scratch, ctx.empty({n, 2}, DType::kF64));
  MOE_RETURN_IF_ERROR(dispatch_full("cross_entropy_forward", logits, [&](auto tag) {
    using F = decltype(tag);
    cross_entropy_forward_kernel<F><<<static_cast<unsigned>(n), kRowThreads, 0, stream_of(ctx)>>>(
        logits.data<F>(), targets.data<int32_t>(), v, lse.data<F>(), data_or_null<F>(row_loss),
        scratch.data<double>());
    add_pair_sums_kernel<<<1, kThreads, 0, stream_of(ctx)>>>(scratch.data<double>(), n,
                                                             sums.data<double>());
  }));
  return launch_status("cross_entropy_forward");
}

Status cross_entropy_backward(Context& ctx, const TensorView& logits, const TensorView& targets,
                              const TensorView& lse, double scale, const TensorView& d_logits) {
  const int64_t n = logits.dim(0), v = logits.dim(1);
  if (n * v == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("cross_entropy_backward", logits, [&](auto tag) {
    using F = decltype(tag);
    const F s = static_cast<F>(scale);
    if (d_logits.dtype() == DType::kBF16) {
      cross_entropy_backward_kernel<F, bf16><<<grid_for(n * v), kThreads, 0, stream_of(ctx)>>>(
          logits.data<F>(), targets.data<int32_t>(), lse.data<F>(), n, FastDivmod(v), s,
          d_logits.data<bf16>());
    } else {
      cross_entropy_backward_kernel<F, F><<<grid_for(n * v), kThreads, 0, stream_of(ctx)>>>(
          logits.data<F>(), targets.data<int32_t>(), lse.data<F>(), n, FastDivmod(v), s,
          d_logits.data<F>());
    }
  }));
  return launch_status("cross_entropy_backward");
}

}  // namespace moe::kernels::cuda
