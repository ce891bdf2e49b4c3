// The Adaptive Clustering router's statistics and metric on the GPU, and the per-row argmax.
// Cluster sums walk the tokens in order with one thread per feature (each owns its column of
// every cluster: no atomics, the CPU's order, the CPU's bits under the backend's no-FMA policy
// in cuda_util.cuh). The metric is a small [E, D] pass
// run by one thread: ref::ac_metric itself (kernels/cpu/router_math.h). Labels outside [0, E)
// are skipped (no sync to report them; the router never produces them).
#include <cmath>

#include "kernels/common.h"
#include "kernels/cpu/router_math.h"
#include "kernels/cuda/ac_router.h"
#include "kernels/cuda/cuda_util.cuh"

namespace moe::kernels::cuda {
namespace {

template <typename A>
__global__ void ac_cluster_sums_kernel(const A* x, const int32_t* labels, int64_t tokens, int64_t d,
                                       int64_t experts, double* sums, int64_t* counts) {
  const int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (q == 0) {
    for (int64_t k = 0; k < experts; ++k) counts[k] = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const int32_t k = labels[t];
      if (k >= 0 && k < experts) counts[k] += 1;
    }
  }
  if (q >= d) return;
  for (int64_t k = 0; k < experts; ++k) sums[k * d + q] = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t k = labels[t];
    if (k < 0 || k >= experts) continue;
    sums[k * d + q] += static_cast<double>(load(x, t * d + q));
  }
}

template <typename A>
__global__ void ac_cluster_abs_dev_kernel(const A* x, const int32_t* labels, int64_t tokens,
                                          int64_t d, int64_t experts, const double* sums,
                                          const int64_t* counts, double* abs_dev) {
  const int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (q >= d) return;
  for (int64_t k = 0; k < experts; ++k) abs_dev[k * d + q] = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t k = labels[t];
    if (k < 0 || k >= experts) continue;
    const double inv = 1.0 / static_cast<double>(counts[k]);
    abs_dev[k * d + q] += fabs(static_cast<double>(load(x, t * d + q)) - sums[k * d + q] * inv);
  }
}

// ref::ac_metric into the f64 scratch w, then metric = w in T. One thread: a small [E, D] pass.
template <typename T>
__global__ void ac_metric_kernel(AcRouterParams params, const double* dev, const int64_t* n,
                                 int64_t experts, int64_t d, double* w, T* metric,
                                 double* summary) {
  ref::ac_metric(params, dev, n, experts, d, w, summary);
  for (int64_t i = 0; i < experts * d; ++i) metric[i] = static_cast<T>(w[i]);
}

template <typename A, typename F>
__global__ void ac_apply_kernel(const A* x, const int32_t* labels, const F* metric, int64_t tokens,
                                int64_t d, F* out) {
  MOE_GRID_LOOP(i, tokens * d) {
    const int64_t t = i / d, q = i % d;
    out[i] = static_cast<F>(load(x, i)) * metric[static_cast<int64_t>(labels[t]) * d + q];
  }
}

template <typename A, typename F>
__global__ void ac_apply_backward_kernel(const F* d_out, const int32_t* labels, const F* metric,
                                         int64_t tokens, int64_t d, A* dx) {
  MOE_GRID_LOOP(i, tokens * d) {
    const int64_t t = i / d, q = i % d;
    store(dx, i,
          static_cast<F>(load(dx, i)) + d_out[i] * metric[static_cast<int64_t>(labels[t]) * d + q]);
  }
}

// One thread per expert column (E is small; D strided reads): the reference's expressions.
template <typename T>
__global__ void normalize_columns_kernel(const T* w, int64_t d, int64_t experts, T* out,
                                         T* inv_norm) {
  MOE_GRID_LOOP(e, experts) { ref::normalize_column<T>(w, d, experts, e, out, inv_norm); }
}

template <typename T>
__global__ void normalize_columns_backward_kernel(const T* d_out, const T* out, const T* inv_norm,
                                                  int64_t d, int64_t experts, T* dw) {
  MOE_GRID_LOOP(e, experts) {
    ref::normalize_column_backward<T>(d_out, out, inv_norm[e], d, experts, e, dw);
  }
}

template <typename T>
__global__ void argmax_rows_kernel(const T* p, int64_t tokens, int64_t experts, int32_t* out) {
  MOE_GRID_LOOP(t, tokens) {
    int64_t best = 0;
    for (int64_t e = 1; e < experts; ++e) {
      if (p[t * experts + e] > p[t * experts + best]) best = e;
    }
    out[t] = static_cast<int32_t>(best);
  }
}

}  // namespace

Status ac_cluster_sums(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& sums, const TensorView& counts) {
  const int64_t d = x.dim(1);
  MOE_RETURN_IF_ERROR(dispatch_float("ac_cluster_sums", x, [&](auto tag) {
    using A = decltype(tag);
    ac_cluster_sums_kernel<A><<<grid_for(std::max<int64_t>(d, 1)), kThreads, 0, stream_of(ctx)>>>(
        x.data<A>(), labels.data<int32_t>(), x.dim(0), d, sums.dim(0), sums.data<double>(),
        counts.data<int64_t>());
  }));
  return launch_status("ac_cluster_sums");
}

Status ac_cluster_abs_dev(Context& ctx, const TensorView& x, const TensorView& labels,
                          const TensorView& sums, const TensorView& counts,
                          const TensorView& abs_dev) {
  const int64_t d = x.dim(1);
  if (d == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("ac_cluster_abs_dev", x, [&](auto tag) {
    using A = decltype(tag);
    ac_cluster_abs_dev_kernel<A><<<grid_for(d), kThreads, 0, stream_of(ctx)>>>(
        x.data<A>(), labels.data<int32_t>(), x.dim(0), d, sums.dim(0), sums.data<double>(),
        counts.data<int64_t>(), abs_dev.data<double>());
  }));
  return launch_status("ac_cluster_abs_dev");
}

Status ac_metric(Context& ctx, const AcRouterParams& params, const TensorView& abs_dev,
                 const TensorView& counts, const TensorView& metric, const TensorView& summary) {
  MOE_ASSIGN_OR_RETURN(Tensor w, ctx.empty({std::max<int64_t>(1, abs_dev.numel())}, DType::kF64));
  MOE_RETURN_IF_ERROR(dispatch_full("ac_metric", metric, [&](auto tag) {
    using T = decltype(tag);
    ac_metric_kernel<T><<<1, 1, 0, stream_of(ctx)>>>(
        params, abs_dev.data<double>(), counts.data<int64_t>(), abs_dev.dim(0), abs_dev.dim(1),
        w.data<double>(), metric.data<T>(), summary.data<double>());
  }));
  return launch_status("ac_metric");
}

Status ac_apply_metric(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& metric, const TensorView& out) {
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("ac_apply_metric", x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ac_apply_kernel<A, F><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        x.data<A>(), labels.data<int32_t>(), metric.data<F>(), x.dim(0), x.dim(1), out.data<F>());
  }));
  return launch_status("ac_apply_metric");
}

Status ac_apply_metric_backward(Context& ctx, const TensorView& d_out, const TensorView& labels,
                                const TensorView& metric, const TensorView& dx) {
  const int64_t n = dx.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("ac_apply_metric_backward", dx, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ac_apply_backward_kernel<A, F><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        d_out.data<F>(), labels.data<int32_t>(), metric.data<F>(), dx.dim(0), dx.dim(1),
        dx.data<A>());
  }));
  return launch_status("ac_apply_metric_backward");
}

Status normalize_columns(Context& ctx, const TensorView& w, const TensorView& out,
                         const TensorView& inv_norm) {
  const int64_t experts = w.dim(1);
  if (experts == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("normalize_columns", w, [&](auto tag) {
    using T = decltype(tag);
    normalize_columns_kernel<T><<<grid_for(experts), kThreads, 0, stream_of(ctx)>>>(
        w.data<T>(), w.dim(0), experts, out.data<T>(), inv_norm.data<T>());
  }));
  return launch_status("normalize_columns");
}

Status normalize_columns_backward(Context& ctx, const TensorView& d_out, const TensorView& out,
                                  const TensorView& inv_norm, const TensorView& dw) {
  const int64_t experts = out.dim(1);
  if (experts == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("normalize_columns_backward", out, [&](auto tag) {
    using T = decltype(tag);
    normalize_columns_backward_kernel<T><<<grid_for(experts), kThreads, 0, stream_of(ctx)>>>(
        d_out.data<T>(), out.data<T>(), inv_norm.data<T>(), out.dim(0), experts, dw.data<T>());
  }));
  return launch_status("normalize_columns_backward");
}

Status argmax_rows(Context& ctx, const TensorView& logits, const TensorView& top1) {
  const int64_t tokens = logits.dim(0);
  if (tokens == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("argmax_rows", logits, [&](auto tag) {
    using T = decltype(tag);
    argmax_rows_kernel<T><<<grid_for(tokens), kThreads, 0, stream_of(ctx)>>>(
        logits.data<T>(), tokens, logits.dim(1), top1.data<int32_t>());
  }));
  return launch_status("argmax_rows");
}

}  // namespace moe::kernels::cuda
