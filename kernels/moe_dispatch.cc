#include "kernels/moe_dispatch.h"

#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/common.h"
#include "kernels/cpu/moe_dispatch_ref.h"
#include "kernels/cpu/row_copy.h"
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
  int32_t* pslot = slot.data<int32_t>();
  int64_t* pload = load.data<int64_t>();
  ref::assign_capacity(pidx, tokens, k, experts, a.capacity, pslot, pload, kept.data<int64_t>());
  // Block offsets of the send buffer: e * C, or the exclusive prefix sum of the loads.
  std::vector<int64_t> block(experts + 1, 0);
  for (int64_t e = 0; e < experts; ++e) {
    block[e + 1] = block[e] + (a.capacity >= 0 ? a.capacity : pload[e]);
  }
  int32_t* prow = row.data<int32_t>();
  int32_t* ptoken = send_token.data<int32_t>();
  int64_t* pkey = send_key.data<int64_t>();
  std::fill_n(ptoken, send_rows, -1);
  std::fill_n(pkey, send_rows, -1);
  int64_t dropped = 0, fully_dropped = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t token_drops = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = pslot[t * k + j];
      if (s < 0) {
        prow[t * k + j] = -1;
        ++token_drops;
        continue;
      }
      const int64_t r = block[pidx[t * k + j]] + s;
      prow[t * k + j] = static_cast<int32_t>(r);
      ptoken[r] = static_cast<int32_t>(t);
      pkey[r] = (a.token_offset + t) * k + j;
    }
    dropped += token_drops;
    fully_dropped += token_drops == k;
  }
  if (drops.numel() > 0) {
    drops.data<double>()[0] += static_cast<double>(dropped);
    drops.data<double>()[1] += static_cast<double>(fully_dropped);
  }
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
  const int64_t blocks = keys.dim(0), c = keys.dim(1);
  const int64_t* pk = keys.data<int64_t>();
  int32_t* pf = filled.data<int32_t>();
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t n = 0;
    for (int64_t i = 0; i < c; ++i) n += pk[b * c + i] >= 0;
    pf[b] = n;
  }
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
  const size_t row_bytes = static_cast<size_t>(src.dim(1)) * dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  const int32_t* idx = index.data<int32_t>();
  const bool streaming = ref::use_streaming_stores(d, row_bytes, dst.nbytes());
  parallel_for(dst.dim(0), row_grain(src.dim(1)), [&](int64_t begin, int64_t end) {
    if (streaming) {
      for (int64_t i = begin; i < end; ++i) {
        ref::stream_row(d + i * row_bytes, idx[i] < 0 ? nullptr : s + idx[i] * row_bytes,
                        row_bytes);
      }
      ref::stream_fence();
      return;
    }
    for (int64_t i = begin; i < end; ++i) {
      if (idx[i] < 0) {
        std::memset(d + i * row_bytes, 0, row_bytes);
      } else {
        std::memcpy(d + i * row_bytes, s + idx[i] * row_bytes, row_bytes);
      }
    }
  });
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
    ref::combine_backward<A, F>(du.data<A>(), y.data<A>(), row.data<int32_t>(), gate.data<F>(),
                                data_or_null<F>(omega), du.dim(0), row.dim(1), y.dim(1), y.dim(0),
                                dy.data<A>(), d_gate.data<F>(),
                                with_omega ? d_omega.data<F>() : nullptr);
  });
}

}  // namespace moe::kernels
