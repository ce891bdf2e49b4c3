#include "kernels/moe_stats.h"

#include "kernels/common.h"
#include "kernels/cpu/moe_stats_ref.h"
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
    ref::entropy_sum<T>(probs.data<T>(), probs.numel(), out.data<double>());
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
    ref::row_norm_sum<T>(x.data<T>(), x.dim(0), x.dim(1), out.data<double>());
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
    ref::column_sum<T>(x.data<T>(), x.dim(0), x.dim(1), col, out.data<double>());
  });
}

Status accumulate_counts(Context& ctx, const TensorView& counts, const TensorView& out) {
  constexpr const char* kOp = "accumulate_counts";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_typed(ctx, kOp, "counts", counts, DType::kI64, Shape{counts.numel()}));
  MOE_RETURN_IF_ERROR(check_slots(ctx, kOp, out, counts.numel()));
  MOE_ON_CUDA(ctx, cuda::accumulate_counts(ctx, counts, out));
  ref::accumulate_counts(counts.data<int64_t>(), counts.numel(), out.data<double>());
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
  ref::count_mismatches(a.data<int32_t>(), b.data<int32_t>(), a.numel(), out.data<double>());
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
    ref::sparsemixer_stats<T>(mask.data<uint8_t>(), is_argmax.data<uint8_t>(), scale.data<T>(),
                              tokens, experts, out.data<double>());
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
  ref::ac_stats(abs_dev.data<double>(), counts.data<int64_t>(), local_counts.data<int64_t>(),
                summary.data<double>(), experts, d, out.data<double>());
  return Status::OK();
}

}  // namespace moe::kernels
