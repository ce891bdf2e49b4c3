#include "kernels/moe_dispatch.h"

#include <algorithm>

#include "kernels/common.h"
#include "kernels/cpu/moe_dispatch_ref.h"
#include "kernels/cuda/moe_dispatch.h"

namespace moe::kernels {
namespace {

// Inside a kernel: every entry of rows [T, K] is -1 or a row of a [limit, ...] tensor.
Status check_row_range(const char* op, const char* name, const TensorView& rows, int64_t limit) {
  const int32_t* r = rows.data<int32_t>();
  for (int64_t i = 0; i < rows.numel(); ++i) {
    if (r[i] < -1 || r[i] >= limit) {
      return invalid_argument_error(op, ": ", name, "[", i, "] = ", r[i], " is outside [-1, ",
                                    limit, ")");
    }
  }
  return Status::OK();
}

// y [M, D] act; row [T, K] i32; gate [T, K] F; omega [D] F or empty; u [T, D] act.
Status check_combine(const Context& ctx, const char* op, const TensorView& y, const TensorView& row,
                     const TensorView& gate, const TensorView& omega, const char* u_name,
                     const TensorView& u) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, "y", y));
  MOE_RETURN_IF_ERROR(check_same_dtype(op, y, u_name, u));
  if (y.ndim() != 2 || row.ndim() != 2 || u.ndim() != 2 || u.dim(1) != y.dim(1)) {
    return invalid_argument_error(op, ": needs y [M, D], row [T, K], ", u_name, " [T, D]; got ",
                                  y.to_string(), ", ", row.to_string(), ", ", u.to_string());
  }
  MOE_RETURN_IF_ERROR(check_tensor(ctx, op, "row", row, DType::kI32, Shape{u.dim(0), row.dim(1)}));
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "gate", gate));
  MOE_RETURN_IF_ERROR(check_compute(op, "gate", gate, y.dtype(), row.shape()));
  if (omega.numel() > 0) {
    MOE_RETURN_IF_ERROR(check_device(ctx, op, "omega", omega));
    MOE_RETURN_IF_ERROR(check_compute(op, "omega", omega, y.dtype(), Shape{y.dim(1)}));
  }
  return Status::OK();
}

}  // namespace

Status moe_layout(Context& ctx, const LayoutArgs& a, const TensorView& idx, const LayoutOut& out) {
  const TensorView &slot = out.slot, &row = out.row, &load = out.load, &kept = out.kept;
  const TensorView &send_token = out.send_token, &send_key = out.send_key, &drops = out.drops;
  constexpr const char* kOp = "moe_layout";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "idx", idx));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "idx", idx, DType::kI32));
  if (idx.ndim() != 2) return invalid_argument_error(kOp, ": idx must be [T, K]");
  if (a.num_experts < 1) return invalid_argument_error(kOp, ": num_experts must be >= 1");
  const int64_t tokens = idx.dim(0), k = idx.dim(1), experts = a.num_experts;
  const int64_t send_rows = a.capacity >= 0 ? experts * a.capacity : tokens * k;
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "slot", slot, DType::kI32, idx.shape()));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "row", row, DType::kI32, idx.shape()));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "load", load, DType::kI64, Shape{experts}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "kept", kept, DType::kI64, Shape{experts}));
  MOE_RETURN_IF_ERROR(
      check_tensor(ctx, kOp, "send_token", send_token, DType::kI32, Shape{send_rows}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "send_key", send_key, DType::kI64, Shape{send_rows}));
  if (drops.numel() > 0) {
    MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "drops", drops, DType::kF64, Shape{2}));
  }
  MOE_ON_CUDA(ctx,
              cuda::moe_layout(ctx, a, idx, {slot, row, load, kept, send_token, send_key, drops}));
  const int32_t* pidx = idx.data<int32_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (pidx[i] < 0 || pidx[i] >= experts) {
      return invalid_argument_error(kOp, ": expert index ", pidx[i], " outside [0, ", experts, ")");
    }
  }
  ref::moe_layout(a, pidx, tokens, k,
                  {slot.data<int32_t>(), row.data<int32_t>(), load.data<int64_t>(),
                   kept.data<int64_t>(), send_token.data<int32_t>(), send_key.data<int64_t>(),
                   drops.numel() > 0 ? drops.data<double>() : nullptr});
  return Status::OK();
}

Status moe_dedup_layout(Context& ctx, const DedupArgs& a, const TensorView& idx,
                        const TensorView& row, const DedupOut& out) {
  constexpr const char* kOp = "moe_dedup_layout";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "idx", idx));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "idx", idx, DType::kI32));
  if (idx.ndim() != 2) return invalid_argument_error(kOp, ": idx must be [T, K]");
  if (a.num_experts < 1 || a.ranks < 1 || a.num_experts % a.ranks != 0 || a.rank < 0 ||
      a.rank >= a.ranks) {
    return invalid_argument_error(kOp, ": needs E >= 1 experts on R >= 1 ranks (R dividing E) and ",
                                  "a rank in [0, R); got E = ", a.num_experts, ", R = ", a.ranks,
                                  ", rank ", a.rank);
  }
  const int64_t tokens = idx.dim(0), k = idx.dim(1), experts = a.num_experts;
  const int64_t send_rows = a.capacity >= 0 ? experts * a.capacity : tokens * k;
  const int64_t unique_rows = tokens * std::min<int64_t>(k, a.ranks - 1);
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "row", row, DType::kI32, idx.shape()));
  MOE_RETURN_IF_ERROR(
      check_tensor(ctx, kOp, "uniq_token", out.uniq_token, DType::kI32, Shape{unique_rows}));
  MOE_RETURN_IF_ERROR(
      check_tensor(ctx, kOp, "uniq_counts", out.uniq_counts, DType::kI64, Shape{a.ranks}));
  MOE_RETURN_IF_ERROR(
      check_tensor(ctx, kOp, "send_uniq", out.send_uniq, DType::kI32, Shape{send_rows}));
  if (out.stats.numel() > 0) {
    MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "stats", out.stats, DType::kF64, Shape{2}));
  }
  MOE_ON_CUDA(ctx, cuda::moe_dedup_layout(ctx, a, idx, row, out));
  const int32_t* pidx = idx.data<int32_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (pidx[i] < 0 || pidx[i] >= experts) {
      return invalid_argument_error(kOp, ": expert index ", pidx[i], " outside [0, ", experts, ")");
    }
  }
  MOE_RETURN_IF_ERROR(check_row_range(kOp, "row", row, send_rows));
  ref::moe_dedup_layout(a, pidx, row.data<int32_t>(), tokens, k,
                        {out.uniq_token.data<int32_t>(), out.uniq_counts.data<int64_t>(),
                         out.send_uniq.data<int32_t>(), data_or_null<double>(out.stats)});
  return Status::OK();
}

Status block_fill_counts(Context& ctx, const TensorView& keys, const TensorView& filled) {
  constexpr const char* kOp = "block_fill_counts";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "keys", keys));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "keys", keys, DType::kI64));
  if (keys.ndim() != 2) return invalid_argument_error(kOp, ": keys must be [B, C]");
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "filled", filled, DType::kI32, Shape{keys.dim(0)}));
  MOE_ON_CUDA(ctx, cuda::block_fill_counts(ctx, keys, filled));
  ref::block_fill_counts(keys.data<int64_t>(), keys.dim(0), keys.dim(1), filled.data<int32_t>());
  return Status::OK();
}

Status gather_rows(Context& ctx, const TensorView& src, const TensorView& index,
                   const TensorView& dst) {
  constexpr const char* kOp = "gather_rows";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "src", src));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, src, "dst", dst));
  if (src.ndim() != 2 || dst.ndim() != 2 || src.dim(1) != dst.dim(1)) {
    return invalid_argument_error(kOp, ": needs src [N, D] and dst [M, D], got ", src.to_string(),
                                  ", ", dst.to_string());
  }
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "index", index, DType::kI32, Shape{dst.dim(0)}));
  MOE_ON_CUDA(ctx, cuda::gather_rows(ctx, src, index, dst));
  MOE_RETURN_IF_ERROR(check_row_range(kOp, "index", index, src.dim(0)));
  ref::gather_rows(src.raw(), index.data<int32_t>(), dst.dim(0), src.dim(1),
                   dtype_size(src.dtype()), dst.raw());
  return Status::OK();
}

Status gather_sum_rows(Context& ctx, const TensorView& src, const TensorView& rows,
                       const TensorView& dst) {
  constexpr const char* kOp = "gather_sum_rows";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "src", src));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, src, "dst", dst));
  if (src.ndim() != 2 || dst.ndim() != 2 || rows.ndim() != 2 || src.dim(1) != dst.dim(1)) {
    return invalid_argument_error(kOp, ": needs src [S, D], rows [T, K] and dst [T, D], got ",
                                  src.to_string(), ", ", rows.to_string(), ", ", dst.to_string());
  }
  MOE_RETURN_IF_ERROR(
      check_tensor(ctx, kOp, "rows", rows, DType::kI32, Shape{dst.dim(0), rows.dim(1)}));
  MOE_ON_CUDA(ctx, cuda::gather_sum_rows(ctx, src, rows, dst));
  MOE_RETURN_IF_ERROR(check_row_range(kOp, "rows", rows, src.dim(0)));
  return dispatch_float(kOp, src, [&](auto tag) {
    using A = decltype(tag);
    ref::gather_sum_rows<A>(src.data<A>(), rows.data<int32_t>(), dst.dim(0), rows.dim(1),
                            src.dim(1), dst.data<A>());
  });
}

Status combine(Context& ctx, const TensorView& y, const TensorView& row, const TensorView& gate,
               const TensorView& omega, const TensorView& u) {
  constexpr const char* kOp = "combine";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_combine(ctx, kOp, y, row, gate, omega, "u", u));
  MOE_ON_CUDA(ctx, cuda::combine(ctx, y, row, gate, omega, u));
  MOE_RETURN_IF_ERROR(check_row_range(kOp, "row", row, y.dim(0)));
  return dispatch_act(kOp, y, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::combine<A, F>(y.data<A>(), row.data<int32_t>(), gate.data<F>(), data_or_null<F>(omega),
                       u.dim(0), row.dim(1), y.dim(1), u.data<A>());
  });
}

Status combine_backward(Context& ctx, const TensorView& du, const TensorView& y,
                        const TensorView& row, const TensorView& gate, const TensorView& omega,
                        const CombineGrads& grads) {
  const TensorView &dy = grads.dy, &d_gate = grads.d_gate, &d_omega = grads.d_omega;
  constexpr const char* kOp = "combine_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_combine(ctx, kOp, y, row, gate, omega, "du", du));
  MOE_RETURN_IF_ERROR(check_like(kOp, y, "dy", dy));
  MOE_RETURN_IF_ERROR(check_like(kOp, gate, "d_gate", d_gate));
  const bool with_omega = omega.numel() > 0 && d_omega.numel() > 0;
  if (with_omega) MOE_RETURN_IF_ERROR(check_like(kOp, omega, "d_omega", d_omega));
  MOE_ON_CUDA(ctx, cuda::combine_backward(ctx, du, y, row, gate, omega, {dy, d_gate, d_omega}));
  MOE_RETURN_IF_ERROR(check_row_range(kOp, "row", row, y.dim(0)));
  return dispatch_act(kOp, y, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::combine_backward<A, F>(
        du.data<A>(), y.data<A>(), row.data<int32_t>(), gate.data<F>(), data_or_null<F>(omega),
        {du.dim(0), row.dim(1), y.dim(1), y.dim(0)},
        {dy.data<A>(), d_gate.data<F>(), with_omega ? d_omega.data<F>() : nullptr});
  });
}

}  // namespace moe::kernels
