// Router and layer statistics on the GPU: per-token values reduced in double into the step's
// statistics slots by the deterministic two-pass reduction (reduce_sum), never read on the host.
#include <cmath>

#include "kernels/common.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/moe_stats.h"

namespace moe::kernels::cuda {
namespace {

template <typename T>
struct RowEntropy {
  const T* p;
  int64_t experts;
  __device__ double operator()(int64_t t) const {
    double h = 0;
    for (int64_t e = 0; e < experts; ++e) {
      const double v = static_cast<double>(p[t * experts + e]);
      if (v > 0) h -= v * log(v);
    }
    return h;
  }
};

template <typename T>
struct RowNorm {
  const T* x;
  int64_t d;
  __device__ double operator()(int64_t t) const {
    double sq = 0;
    for (int64_t q = 0; q < d; ++q) {
      const double v = static_cast<double>(load(x, t * d + q));
      sq += v * v;
    }
    return sqrt(sq);
  }
};

template <typename T>
struct Column {
  const T* x;
  int64_t width, col;
  __device__ double operator()(int64_t t) const { return static_cast<double>(x[t * width + col]); }
};

struct Mismatch {
  const int32_t* a;
  const int32_t* b;
  __device__ double operator()(int64_t i) const { return a[i] != b[i] ? 1.0 : 0.0; }
};

// SparseMixer statistic `which`: 0 unmasked experts, 1 single-expert token, 2 non-argmax sample,
// 3 halved gate.
template <typename T>
struct SparseMixerStat {
  const uint8_t* mask;
  const uint8_t* is_argmax;
  const T* scale;
  int64_t experts;
  int which;
  __device__ double operator()(int64_t t) const {
    if (which >= 2)
      return which == 2 ? (is_argmax[t] == 0 ? 1.0 : 0.0) : (scale[t] != T(1) ? 1.0 : 0.0);
    int64_t unmasked = 0;
    for (int64_t e = 0; e < experts; ++e) unmasked += mask[t * experts + e];
    return which == 0 ? static_cast<double>(unmasked) : (unmasked == 1 ? 1.0 : 0.0);
  }
};

__global__ void accumulate_counts_kernel(const int64_t* c, int64_t n, double* out) {
  MOE_GRID_LOOP(i, n) { out[i] += static_cast<double>(c[i]); }
}

// One thread per cluster, then thread 0 updates the fixed slots (ac_stats in kernels/moe_stats.h).
__global__ void ac_stats_kernel(const double* dev, const int64_t* n, const int64_t* local,
                                const double* sum, int64_t experts, int64_t d, double* o) {
  for (int64_t k = threadIdx.x; k < experts; k += blockDim.x) {
    o[k] += static_cast<double>(local[k]);
    if (n[k] == 0) continue;
    double mean_mad = 0;
    for (int64_t q = 0; q < d; ++q) mean_mad += dev[k * d + q] / static_cast<double>(n[k]);
    mean_mad /= static_cast<double>(d);
    o[experts + k] += mean_mad * static_cast<double>(local[k]);
  }
  if (threadIdx.x == 0) {
    double* fixed = o + 2 * experts;
    const bool first = fixed[4] == 0;
    fixed[0] += sum[0];
    fixed[1] = first ? sum[2] : fmin(fixed[1], sum[2]);
    fixed[2] = first ? sum[3] : fmax(fixed[2], sum[3]);
    fixed[3] = sum[4];
    fixed[4] += 1;
  }
}

}  // namespace

Status entropy_sum(Context& ctx, const TensorView& probs, const TensorView& out) {
  Status launched = Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("entropy_sum", probs, [&](auto tag) {
    using T = decltype(tag);
    launched = reduce_sum(ctx, "entropy_sum", probs.dim(0),
                          RowEntropy<T>{probs.data<T>(), probs.dim(1)}, out.data<double>());
  }));
  return launched;
}

Status row_norm_sum(Context& ctx, const TensorView& x, const TensorView& out) {
  Status launched = Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("row_norm_sum", x, [&](auto tag) {
    using T = decltype(tag);
    launched = reduce_sum(ctx, "row_norm_sum", x.dim(0), RowNorm<T>{x.data<T>(), x.dim(1)},
                          out.data<double>());
  }));
  return launched;
}

Status column_sum(Context& ctx, const TensorView& x, int64_t col, const TensorView& out) {
  Status launched = Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("column_sum", x, [&](auto tag) {
    using T = decltype(tag);
    launched = reduce_sum(ctx, "column_sum", x.dim(0), Column<T>{x.data<T>(), x.dim(1), col},
                          out.data<double>());
  }));
  return launched;
}

Status accumulate_counts(Context& ctx, const TensorView& counts, const TensorView& out) {
  const int64_t n = counts.numel();
  if (n == 0) return Status::OK();
  accumulate_counts_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(counts.data<int64_t>(), n,
                                                                         out.data<double>());
  return launch_status("accumulate_counts");
}

Status count_mismatches(Context& ctx, const TensorView& a, const TensorView& b,
                        const TensorView& out) {
  return reduce_sum(ctx, "count_mismatches", a.numel(),
                    Mismatch{a.data<int32_t>(), b.data<int32_t>()}, out.data<double>());
}

Status sparsemixer_stats(Context& ctx, const TensorView& mask, const TensorView& is_argmax,
                         const TensorView& scale, const TensorView& out) {
  Status launched = Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("sparsemixer_stats", scale, [&](auto tag) {
    using T = decltype(tag);
    for (int which = 0; which < 4 && launched.ok(); ++which) {
      const SparseMixerStat<T> f{mask.data<uint8_t>(), is_argmax.data<uint8_t>(), scale.data<T>(),
                                 mask.dim(1), which};
      launched = reduce_sum(ctx, "sparsemixer_stats", mask.dim(0), f, out.data<double>() + which);
    }
  }));
  return launched;
}

Status ac_stats(Context& ctx, const TensorView& abs_dev, const TensorView& counts,
                const TensorView& local_counts, const TensorView& summary, const TensorView& out) {
  ac_stats_kernel<<<1, kThreads, 0, stream_of(ctx)>>>(
      abs_dev.data<double>(), counts.data<int64_t>(), local_counts.data<int64_t>(),
      summary.data<double>(), abs_dev.dim(0), abs_dev.dim(1), out.data<double>());
  return launch_status("ac_stats");
}

}  // namespace moe::kernels::cuda
