#include "kernels/moe_stats.h"

#include <algorithm>
#include <cmath>

#include "kernels/common.h"
#include "kernels/cuda/moe_stats.h"

namespace moe::kernels {
namespace {

Status check_slots(const Context& ctx, const char* op, const TensorView& out, int64_t n) {
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "out", out));
  MOE_RETURN_IF_ERROR(check_dtype(op, "out", out, DType::kF64));
  return check_shape(op, "out", out, Shape{n});
}

Status check_typed(const Context& ctx, const char* op, const char* name, const TensorView& t,
                   DType dtype, const Shape& shape) {
  MOE_RETURN_IF_ERROR(check_device(ctx, op, name, t));
  MOE_RETURN_IF_ERROR(check_dtype(op, name, t, dtype));
  return check_shape(op, name, t, shape);
}

}  // namespace

Status entropy_sum(Context& ctx, const TensorView& probs, const TensorView& out) {
  constexpr const char* kOp = "entropy_sum";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_full(ctx, kOp, "probs", probs));
  if (probs.ndim() != 2) return invalid_argument_error(kOp, ": probs must be [T, E]");
  MOE_RETURN_IF_ERROR(check_slots(ctx, kOp, out, 1));
  MOE_ON_CUDA(ctx, cuda::entropy_sum(ctx, probs, out));
  return dispatch_full(kOp, probs, [&](auto tag) {
    using T = decltype(tag);
    const T* p = probs.data<T>();
    double h = 0;
    for (int64_t i = 0; i < probs.numel(); ++i)
      if (p[i] > T(0)) h -= static_cast<double>(p[i]) * std::log(static_cast<double>(p[i]));
    out.data<double>()[0] += h;
  });
}

Status row_norm_sum(Context& ctx, const TensorView& x, const TensorView& out) {
  constexpr const char* kOp = "row_norm_sum";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  if (x.ndim() != 2) return invalid_argument_error(kOp, ": x must be [T, D]");
  MOE_RETURN_IF_ERROR(check_slots(ctx, kOp, out, 1));
  MOE_ON_CUDA(ctx, cuda::row_norm_sum(ctx, x, out));
  return dispatch_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    const int64_t d = x.dim(1);
    double total = 0;
    for (int64_t t = 0; t < x.dim(0); ++t) {
      double sq = 0;
      for (int64_t q = 0; q < d; ++q) {
        const double v = static_cast<double>(p[t * d + q]);
        sq += v * v;
      }
      total += std::sqrt(sq);
    }
    out.data<double>()[0] += total;
  });
}

Status column_sum(Context& ctx, const TensorView& x, int64_t col, const TensorView& out) {
  constexpr const char* kOp = "column_sum";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_full(ctx, kOp, "x", x));
  if (x.ndim() != 2 || col < 0 || col >= x.dim(1)) {
    return invalid_argument_error(kOp, ": column ", col, " of ", x.to_string());
  }
  MOE_RETURN_IF_ERROR(check_slots(ctx, kOp, out, 1));
  MOE_ON_CUDA(ctx, cuda::column_sum(ctx, x, col, out));
  return dispatch_full(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    double s = 0;
    for (int64_t t = 0; t < x.dim(0); ++t) s += static_cast<double>(p[t * x.dim(1) + col]);
    out.data<double>()[0] += s;
  });
}

Status accumulate_counts(Context& ctx, const TensorView& counts, const TensorView& out) {
  constexpr const char* kOp = "accumulate_counts";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_typed(ctx, kOp, "counts", counts, DType::kI64, Shape{counts.numel()}));
  MOE_RETURN_IF_ERROR(check_slots(ctx, kOp, out, counts.numel()));
  MOE_ON_CUDA(ctx, cuda::accumulate_counts(ctx, counts, out));
  const int64_t* c = counts.data<int64_t>();
  double* o = out.data<double>();
  for (int64_t i = 0; i < counts.numel(); ++i) o[i] += static_cast<double>(c[i]);
  return Status::OK();
}

Status count_mismatches(Context& ctx, const TensorView& a, const TensorView& b,
                        const TensorView& out) {
  constexpr const char* kOp = "count_mismatches";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_typed(ctx, kOp, "a", a, DType::kI32, Shape{a.numel()}));
  MOE_RETURN_IF_ERROR(check_typed(ctx, kOp, "b", b, DType::kI32, Shape{a.numel()}));
  MOE_RETURN_IF_ERROR(check_slots(ctx, kOp, out, 1));
  MOE_ON_CUDA(ctx, cuda::count_mismatches(ctx, a, b, out));
  const int32_t* pa = a.data<int32_t>();
  const int32_t* pb = b.data<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) n += pa[i] != pb[i];
  out.data<double>()[0] += static_cast<double>(n);
  return Status::OK();
}

Status sparsemixer_stats(Context& ctx, const TensorView& mask, const TensorView& is_argmax,
                         const TensorView& scale, const TensorView& out) {
  constexpr const char* kOp = "sparsemixer_stats";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  if (mask.ndim() != 2) return invalid_argument_error(kOp, ": mask must be [T, E]");
  const int64_t tokens = mask.dim(0), experts = mask.dim(1);
  MOE_RETURN_IF_ERROR(check_typed(ctx, kOp, "mask", mask, DType::kU8, mask.shape()));
  MOE_RETURN_IF_ERROR(check_typed(ctx, kOp, "is_argmax", is_argmax, DType::kU8, Shape{tokens}));
  MOE_RETURN_IF_ERROR(check_full(ctx, kOp, "scale", scale));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "scale", scale, Shape{tokens}));
  MOE_RETURN_IF_ERROR(check_slots(ctx, kOp, out, 4));
  MOE_ON_CUDA(ctx, cuda::sparsemixer_stats(ctx, mask, is_argmax, scale, out));
  return dispatch_full(kOp, scale, [&](auto tag) {
    using T = decltype(tag);
    const uint8_t* m = mask.data<uint8_t>();
    const uint8_t* am = is_argmax.data<uint8_t>();
    const T* c = scale.data<T>();
    double* o = out.data<double>();
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t unmasked = 0;
      for (int64_t e = 0; e < experts; ++e) unmasked += m[t * experts + e];
      o[0] += static_cast<double>(unmasked);
      o[1] += unmasked == 1;
      o[2] += am[t] == 0;
      o[3] += c[t] != T(1);
    }
  });
}

Status ac_stats(Context& ctx, const TensorView& abs_dev, const TensorView& counts,
                const TensorView& local_counts, const TensorView& summary, const TensorView& out) {
  constexpr const char* kOp = "ac_stats";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  if (abs_dev.ndim() != 2) return invalid_argument_error(kOp, ": abs_dev must be [E, D]");
  const int64_t experts = abs_dev.dim(0), d = abs_dev.dim(1);
  MOE_RETURN_IF_ERROR(check_typed(ctx, kOp, "abs_dev", abs_dev, DType::kF64, abs_dev.shape()));
  MOE_RETURN_IF_ERROR(check_typed(ctx, kOp, "counts", counts, DType::kI64, Shape{experts}));
  MOE_RETURN_IF_ERROR(
      check_typed(ctx, kOp, "local_counts", local_counts, DType::kI64, Shape{experts}));
  MOE_RETURN_IF_ERROR(check_typed(ctx, kOp, "summary", summary, DType::kF64, Shape{5}));
  MOE_RETURN_IF_ERROR(check_slots(ctx, kOp, out, 2 * experts + kAcStatsFixed));
  MOE_ON_CUDA(ctx, cuda::ac_stats(ctx, abs_dev, counts, local_counts, summary, out));
  const double* dev = abs_dev.data<double>();
  const int64_t* n = counts.data<int64_t>();
  const int64_t* local = local_counts.data<int64_t>();
  const double* sum = summary.data<double>();
  double* o = out.data<double>();
  for (int64_t k = 0; k < experts; ++k) {
    o[k] += static_cast<double>(local[k]);
    if (n[k] == 0) continue;
    double mean_mad = 0;
    for (int64_t q = 0; q < d; ++q) mean_mad += dev[k * d + q] / static_cast<double>(n[k]);
    mean_mad /= static_cast<double>(d);
    o[experts + k] += mean_mad * static_cast<double>(local[k]);
  }
  double* fixed = o + 2 * experts;
  const bool first = fixed[4] == 0;
  fixed[0] += sum[0];
  fixed[1] = first ? sum[2] : std::min(fixed[1], sum[2]);
  fixed[2] = first ? sum[3] : std::max(fixed[2], sum[3]);
  fixed[3] = sum[4];
  fixed[4] += 1;
  return Status::OK();
}

}  // namespace moe::kernels
