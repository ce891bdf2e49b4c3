// The Adaptive Clustering router's statistics and metric on the GPU, and the per-row argmax.
// Cluster statistics group the tokens by label (a stable sort, key_runs.h); one thread per
// (chunk of ref::kAcSumChunk of a cluster's tokens, feature) sums its chunk in token order, and
// one per (cluster, feature) adds the chunks in order: no atomics, the CPU's order, the CPU's
// bits under the backend's no-FMA policy in cuda_util.cuh.
// The metric runs the reference's steps (router_math.h) one element per thread, its long sums in
// the chunked order both backends share (kernels/cpu/chunked_sum.h): the CPU's bits as well.
// The statistics skip labels outside [0, E) (no sync to report them; the router never produces
// them); ac_apply_metric and its backward read metric[labels[t]] unchecked, as router.h requires
// labels in [0, E).
#include <algorithm>
#include <cmath>

#include "base/fast_divmod.h"
#include "kernels/common.h"
#include "kernels/cpu/router_math.h"
#include "kernels/cpu/router_ref.h"
#include "kernels/cuda/ac_router.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/key_runs.h"

namespace moe::kernels::cuda {
namespace {

// The first sorted position whose key is >= k (keys ascending).
__device__ __forceinline__ int64_t first_at_least(const int32_t* keys, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < k) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The tokens grouped by label (key_runs.h) as the kernels read them.
struct LabelRuns {
  const int32_t* keys;  // sorted labels
  const int32_t* rows;  // their tokens
  int64_t tokens;
};

// counts[k]: the length of cluster k's run (labels outside [0, E) belong to no cluster).
__global__ void ac_cluster_counts_kernel(const int32_t* keys, int64_t tokens, int64_t experts,
                                         int64_t* counts) {
  MOE_GRID_LOOP(k, experts) {
    counts[k] = first_at_least(keys, tokens, k + 1) - first_at_least(keys, tokens, k);
  }
}

// The clusters' chunks of ref::kAcSumChunk tokens (runs of the stable sort, in token order):
// chunk_first[k] = the chunks of clusters before k, chunk_first[E] = all (one thread: E is small).
// From this rank's runs, never from the counts a caller passes (all-reduced for global
// statistics, they count other ranks' tokens too).
__global__ void ac_chunk_table_kernel(LabelRuns runs, int64_t experts, int64_t* chunk_first) {
  int64_t chunks = 0;
  for (int64_t k = 0; k < experts; ++k) {
    chunk_first[k] = chunks;
    const int64_t run =
        first_at_least(runs.keys, runs.tokens, k + 1) - first_at_least(runs.keys, runs.tokens, k);
    chunks += (run + ref::kAcSumChunk - 1) / ref::kAcSumChunk;
  }
  chunk_first[experts] = chunks;
}

// What a chunk sums over its tokens' feature q: the values (the sums) or their absolute
// deviations from the cluster's mean sums[k, q] / counts[k] (ref::ac_cluster_abs_dev's terms).
struct AcTerms {
  const double* sums = nullptr;  // null: the values themselves
  const int64_t* counts = nullptr;
};

// Thread (q, chunk g): partial[g, q] = the chunk's terms of feature q in token order, from zero
// (threads of a warp read one row's adjacent features). Chunks past the table's total do nothing.
template <typename A>
__global__ void ac_cluster_partials_kernel(const A* x, LabelRuns runs, int64_t d, int64_t experts,
                                           const int64_t* chunk_first, int64_t max_chunks,
                                           AcTerms terms, double* partial) {
  const int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (q >= d) return;
  for (int64_t g = blockIdx.y; g < max_chunks && g < chunk_first[experts]; g += gridDim.y) {
    const int64_t k = segment_of(chunk_first, experts, g);
    const int64_t run_end = first_at_least(runs.keys, runs.tokens, k + 1);
    const int64_t begin =
        first_at_least(runs.keys, runs.tokens, k) + (g - chunk_first[k]) * ref::kAcSumChunk;
    const int64_t end = begin + ref::kAcSumChunk < run_end ? begin + ref::kAcSumChunk : run_end;
    const double mean = terms.sums != nullptr
                            ? terms.sums[k * d + q] * (1.0 / static_cast<double>(terms.counts[k]))
                            : 0.0;
    double acc = 0;
#pragma unroll 4
    for (int64_t r = begin; r < end; ++r) {
      const double v = static_cast<double>(load(x, static_cast<int64_t>(runs.rows[r]) * d + q));
      acc += terms.sums != nullptr ? fabs(v - mean) : v;
    }
    partial[g * d + q] = acc;
  }
}

// out[k, q] = cluster k's chunks of feature q added in chunk order, from zero.
__global__ void ac_cluster_finish_kernel(const double* partial, const int64_t* chunk_first,
                                         int64_t d, int64_t experts, double* out) {
  MOE_GRID_LOOP(i, experts * d) {
    const int64_t k = i / d, q = i % d;
    double acc = 0;
    for (int64_t g = chunk_first[k]; g < chunk_first[k + 1]; ++g) acc += partial[g * d + q];
    out[i] = acc;
  }
}

// summary[0] = the tiny clusters, *active = the others.
__global__ void ac_cluster_census_kernel(AcRouterParams params, const int64_t* n, int64_t experts,
                                         double* summary, int64_t* active) {
  int64_t count = 0;
  for (int64_t k = 0; k < experts; ++k) count += ref::ac_active(params, n[k]) ? 1 : 0;
  *active = count;
  for (int i = 0; i < 5; ++i) summary[i] = 0.0;
  summary[0] = static_cast<double>(experts - count);
}

// w = ref::ac_raw_weight; terms = w for active clusters, 0 for the others (the reference code's
// mean over the active weights).
__global__ void ac_raw_weights_kernel(AcRouterParams params, const double* dev, const int64_t* n,
                                      int64_t experts, int64_t d, double* w, double* terms) {
  MOE_GRID_LOOP(i, experts * d) {
    const int64_t k = i / d;
    w[i] = ref::ac_raw_weight(params, dev[i], n[k]);
    terms[i] = ref::ac_active(params, n[k]) ? w[i] : 0.0;
  }
}

// Paper: an active cluster's weights times d over their (chunked) sum.
__global__ void ac_scale_clusters_kernel(AcRouterParams params, const int64_t* n,
                                         const double* row_sums, int64_t experts, int64_t d,
                                         double* w) {
  MOE_GRID_LOOP(i, experts * d) {
    const int64_t k = i / d;
    if (ref::ac_active(params, n[k])) w[i] *= static_cast<double>(d) / row_sums[k];
  }
}

// Reference code: clip the active weights at clip_mult x their mean (total / (active x d));
// terms becomes 1 where a weight was clipped.
__global__ void ac_clip_kernel(AcRouterParams params, const int64_t* n, const double* total,
                               const int64_t* active, int64_t experts, int64_t d, double* w,
                               double* terms) {
  if (*active == 0) return;
  const double denom = static_cast<double>(*active * d);
  const double cap = params.clip_mult * (*total / denom);
  MOE_GRID_LOOP(i, experts * d) {
    const bool clip = ref::ac_active(params, n[i / d]) && w[i] > cap;
    terms[i] = clip ? 1.0 : 0.0;
    if (clip) w[i] = cap;
  }
}

__global__ void ac_normalize_features_kernel(AcRouterParams params, const int64_t* n,
                                             const int64_t* active, double* clipped,
                                             double* summary, int64_t experts, int64_t d,
                                             double* w) {
  if (*active == 0) return;
  MOE_GRID_LOOP(q, d) { ref::ac_normalize_feature(params, n, experts, d, *active, q, w); }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    summary[1] = *clipped / static_cast<double>(*active * d);
  }
}

// summary[2..4] = min, max (order-free: one block, strided) and the chunked mean; metric = w.
template <typename T>
__global__ void ac_summary_kernel(const double* w, const double* total, int64_t size,
                                  double* summary, T* metric) {
  __shared__ double scratch[32];
  double mn = INFINITY, mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
    mn = fmin(mn, w[i]);
    mx = fmax(mx, w[i]);
    metric[i] = static_cast<T>(w[i]);
  }
  mx = block_max(mx, scratch);
  mn = -block_max(-mn, scratch);
  if (threadIdx.x == 0) {
    summary[2] = mn;
    summary[3] = mx;
    summary[4] = *total / static_cast<double>(size > 0 ? size : 1);
  }
}

template <typename A, typename F>
__global__ void ac_apply_kernel(const A* x, const int32_t* labels, const F* metric, int64_t tokens,
                                FastDivmod by_d, F* out) {
  const int64_t d = by_d.divisor();
  MOE_GRID_LOOP(i, tokens * d) {
    int64_t t, q;
    by_d.divmod(i, &t, &q);
    out[i] = static_cast<F>(load(x, i)) * metric[static_cast<int64_t>(labels[t]) * d + q];
  }
}

template <typename A, typename F>
__global__ void ac_apply_backward_kernel(const F* d_out, const int32_t* labels, const F* metric,
                                         int64_t tokens, FastDivmod by_d, A* dx) {
  const int64_t d = by_d.divisor();
  MOE_GRID_LOOP(i, tokens * d) {
    int64_t t, q;
    by_d.divmod(i, &t, &q);
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

namespace {

// ac_cluster_partials_kernel then ac_cluster_finish_kernel into out [E, d]: the clusters' terms
// (AcTerms) in ref::kAcSumChunk-token chunks, as router_ref.cc sums them.
Status cluster_chunk_sums(Context& ctx, const char* op, const TensorView& x, const KeyRuns& runs,
                          int64_t experts, AcTerms terms, double* out) {
  const int64_t tokens = x.dim(0), d = x.dim(1);
  const int64_t max_chunks = tokens / ref::kAcSumChunk + experts;  // at least the table's total
  MOE_ASSIGN_OR_RETURN(Tensor table, ctx.empty({experts + 1}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(Tensor partial,
                       ctx.empty({std::max<int64_t>(1, max_chunks), d}, DType::kF64));
  const cudaStream_t s = stream_of(ctx);
  const LabelRuns label_runs{runs.keys.data<int32_t>(), runs.rows.data<int32_t>(), tokens};
  ac_chunk_table_kernel<<<1, 1, 0, s>>>(label_runs, experts, table.data<int64_t>());
  MOE_RETURN_IF_ERROR(dispatch_float(op, x, [&](auto tag) {
    using A = decltype(tag);
    const dim3 grid(static_cast<unsigned>((d + kThreads - 1) / kThreads),
                    static_cast<unsigned>(std::max<int64_t>(1, std::min(max_chunks, kMaxGridY))));
    ac_cluster_partials_kernel<A><<<grid, kThreads, 0, s>>>(x.data<A>(), label_runs, d, experts,
                                                            table.data<int64_t>(), max_chunks,
                                                            terms, partial.data<double>());
  }));
  ac_cluster_finish_kernel<<<grid_for(experts * d), kThreads, 0, s>>>(
      partial.data<double>(), table.data<int64_t>(), d, experts, out);
  return launch_status(op);
}

}  // namespace

Status ac_cluster_sums(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& sums, const TensorView& counts) {
  const int64_t tokens = x.dim(0), d = x.dim(1), experts = sums.dim(0);
  if (experts == 0) return Status::OK();
  MOE_ASSIGN_OR_RETURN(KeyRuns runs, sort_rows_by_key(ctx, labels));
  ac_cluster_counts_kernel<<<grid_for(experts), kThreads, 0, stream_of(ctx)>>>(
      runs.keys.data<int32_t>(), tokens, experts, counts.data<int64_t>());
  MOE_RETURN_IF_ERROR(launch_status("ac_cluster_sums"));
  if (d == 0) return Status::OK();
  return cluster_chunk_sums(ctx, "ac_cluster_sums", x, runs, experts, AcTerms{},
                            sums.data<double>());
}

Status ac_cluster_abs_dev(Context& ctx, const TensorView& x, const TensorView& labels,
                          const TensorView& sums, const TensorView& counts,
                          const TensorView& abs_dev) {
  const int64_t d = x.dim(1), experts = sums.dim(0);
  if (d == 0 || experts == 0) return Status::OK();
  MOE_ASSIGN_OR_RETURN(KeyRuns runs, sort_rows_by_key(ctx, labels));
  // The mean from the given sums and counts (global statistics: every rank's).
  return cluster_chunk_sums(ctx, "ac_cluster_abs_dev", x, runs, experts,
                            AcTerms{sums.data<double>(), counts.data<int64_t>()},
                            abs_dev.data<double>());
}

// The steps of router_ref.cc's ac_metric in its order, each element on its own thread and the
// long sums through chunked_row_sums (kernels/cpu/chunked_sum.h's order): the CPU's bits.
Status ac_metric(Context& ctx, const AcRouterParams& params, const TensorView& abs_dev,
                 const TensorView& counts, const TensorView& metric, const TensorView& summary) {
  const int64_t experts = abs_dev.dim(0), d = abs_dev.dim(1), size = experts * d;
  cudaStream_t s = stream_of(ctx);
  MOE_ASSIGN_OR_RETURN(Tensor w, ctx.empty({std::max<int64_t>(1, size)}, DType::kF64));
  MOE_ASSIGN_OR_RETURN(Tensor terms, ctx.empty({std::max<int64_t>(1, size)}, DType::kF64));
  MOE_ASSIGN_OR_RETURN(Tensor sums, ctx.empty({std::max<int64_t>(2, experts)}, DType::kF64));
  MOE_ASSIGN_OR_RETURN(Tensor active, ctx.empty({1}, DType::kI64));
  const int64_t* n = counts.data<int64_t>();
  double* sum = sums.data<double>();
  ac_cluster_census_kernel<<<1, 1, 0, s>>>(params, n, experts, summary.data<double>(),
                                           active.data<int64_t>());
  ac_raw_weights_kernel<<<grid_for(size), kThreads, 0, s>>>(
      params, abs_dev.data<double>(), n, experts, d, w.data<double>(), terms.data<double>());
  MOE_RETURN_IF_ERROR(launch_status("ac_metric"));
  if (params.normalization == AcNormalization::kPaper) {
    MOE_RETURN_IF_ERROR(chunked_row_sums(ctx, w.data<double>(), experts, d, sum));
    ac_scale_clusters_kernel<<<grid_for(size), kThreads, 0, s>>>(params, n, sum, experts, d,
                                                                 w.data<double>());
  } else {
    MOE_RETURN_IF_ERROR(chunked_row_sums(ctx, terms.data<double>(), 1, size, sum));
    ac_clip_kernel<<<grid_for(size), kThreads, 0, s>>>(
        params, n, sum, active.data<int64_t>(), experts, d, w.data<double>(), terms.data<double>());
    MOE_RETURN_IF_ERROR(chunked_row_sums(ctx, terms.data<double>(), 1, size, sum + 1));
    ac_normalize_features_kernel<<<grid_for(d), kThreads, 0, s>>>(params, n, active.data<int64_t>(),
                                                                  sum + 1, summary.data<double>(),
                                                                  experts, d, w.data<double>());
  }
  MOE_RETURN_IF_ERROR(launch_status("ac_metric"));
  MOE_RETURN_IF_ERROR(chunked_row_sums(ctx, w.data<double>(), 1, size, sum));
  MOE_RETURN_IF_ERROR(dispatch_full("ac_metric", metric, [&](auto tag) {
    using T = decltype(tag);
    ac_summary_kernel<T><<<1, kThreads, 0, s>>>(w.data<double>(), sum, size, summary.data<double>(),
                                                metric.data<T>());
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
        x.data<A>(), labels.data<int32_t>(), metric.data<F>(), x.dim(0), FastDivmod(x.dim(1)),
        out.data<F>());
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
        d_out.data<F>(), labels.data<int32_t>(), metric.data<F>(), dx.dim(0), FastDivmod(dx.dim(1)),
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
