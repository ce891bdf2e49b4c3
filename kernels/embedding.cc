#include "kernels/embedding.h"

#include "kernels/common.h"
#include "kernels/cpu/embedding_ref.h"
#include "kernels/cuda/embedding.h"

namespace moe::kernels {
namespace {

Status check_ids(const Context& ctx, const char* op, const TensorView& ids) {
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "ids", ids));
  MOE_RETURN_IF_ERROR(check_dtype(op, "ids", ids, DType::kI32));
  if (ids.ndim() != 1)
    return invalid_argument_error(op, ": ids must be [N], got ", ids.to_string());
  return Status::OK();
}

// positions [S_max, D] of dtype `dtype` (or empty), and N divisible by S <= S_max.
Status check_positions(const Context& ctx, const char* op, const char* name, const TensorView& pos,
                       DType dtype, int64_t n, int64_t d, int64_t seq_len) {
  if (pos.numel() == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(check_device(ctx, op, name, pos));
  MOE_RETURN_IF_ERROR(check_dtype(op, name, pos, dtype));
  if (pos.ndim() != 2 || pos.dim(1) != d || seq_len < 1 || seq_len > pos.dim(0) ||
      n % seq_len != 0) {
    return invalid_argument_error(op, ": ", name, " ", pos.to_string(), " does not fit ", n,
                                  " rows of D = ", d, " in sequences of ", seq_len);
  }
  return Status::OK();
}

Status bad_id(const char* op, const TensorView& ids, int64_t at, int64_t vocab) {
  return invalid_argument_error(op, ": ids: id ", ids.data<int32_t>()[at], " at position ", at,
                                " is outside the vocabulary [0, ", vocab, ")");
}

}  // namespace

Status embedding_forward(Context& ctx, const TensorView& ids, const TensorView& table,
                         const TensorView& positions, int64_t seq_len, const TensorView& out) {
  constexpr const char* kOp = "embedding_forward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_ids(ctx, kOp, ids));
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "table", table));
  if (table.ndim() != 2) {
    return invalid_argument_error(kOp, ": table must be [V, D], got ", table.to_string());
  }
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "out", out));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "out", out, Shape{ids.dim(0), table.dim(1)}));
  const DType f = compute_dtype(out.dtype());
  MOE_RETURN_IF_ERROR(
      check_positions(ctx, kOp, "positions", positions, f, ids.dim(0), table.dim(1), seq_len));
  const bool widen = out.dtype() == DType::kBF16 && table.dtype() == DType::kF32;
  if (table.dtype() != out.dtype() && !widen) {
    return invalid_argument_error(kOp, ": table has dtype ", dtype_name(table.dtype()),
                                  ", expected ", dtype_name(out.dtype()));
  }
  MOE_ON_CUDA(ctx, cuda::embedding_forward(ctx, ids, table, positions, seq_len, out));
  int64_t bad = -1;
  auto run = [&](auto wt, auto at, auto ft) {
    using W = decltype(wt);
    using A = decltype(at);
    using F = decltype(ft);
    bad = ref::embedding_forward<W, A, F>(ids.data<int32_t>(), ids.dim(0), table.data<W>(),
                                          table.dim(0), data_or_null<F>(positions), seq_len,
                                          table.dim(1), out.data<A>());
  };
  if (widen) {
    run(float{}, bf16{}, float{});
  } else {
    MOE_RETURN_IF_ERROR(dispatch_act(kOp, out, [&](auto at, auto ft) { run(at, at, ft); }));
  }
  return bad < 0 ? Status::OK() : bad_id(kOp, ids, bad, table.dim(0));
}

Status embedding_backward(Context& ctx, const TensorView& ids, const TensorView& d_out,
                          const TensorView& d_table, const TensorView& d_positions,
                          int64_t seq_len) {
  constexpr const char* kOp = "embedding_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_ids(ctx, kOp, ids));
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "d_out", d_out));
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "d_table", d_table));
  if (d_table.ndim() != 2) {
    return invalid_argument_error(kOp, ": d_table must be [V, D], got ", d_table.to_string());
  }
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "d_table", d_table, compute_dtype(d_out.dtype())));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_out", d_out, Shape{ids.dim(0), d_table.dim(1)}));
  MOE_RETURN_IF_ERROR(check_positions(ctx, kOp, "d_positions", d_positions, d_table.dtype(),
                                      ids.dim(0), d_table.dim(1), seq_len));
  MOE_ON_CUDA(ctx, cuda::embedding_backward(ctx, ids, d_out, d_table, d_positions, seq_len));
  int64_t bad = -1;
  MOE_RETURN_IF_ERROR(dispatch_act(kOp, d_out, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    bad = ref::embedding_backward<A, F>(ids.data<int32_t>(), ids.dim(0), d_table.dim(0),
                                        d_out.data<A>(), seq_len, d_table.dim(1), d_table.data<F>(),
                                        data_or_null<F>(d_positions));
  }));
  return bad < 0 ? Status::OK() : bad_id(kOp, ids, bad, d_table.dim(0));
}

}  // namespace moe::kernels
