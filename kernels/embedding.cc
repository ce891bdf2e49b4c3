#include "kernels/embedding.h"

#include "kernels/common.h"
#include "kernels/reference/embedding_ref.h"

namespace moe::kernels {
namespace {

// ids i32 [N] within [0, V) of table [V, D]; rows [N, D] of the table's dtype.
Status check_args(const char* op, const TensorView& ids, const TensorView& table,
                  const char* table_name, const TensorView& rows, const char* rows_name) {
  MOE_RETURN_IF_ERROR(check_host_float(op, table_name, table));
  if (table.ndim() != 2) {
    return invalid_argument_error(op, ": ", table_name, " must be [V, D], got ", table.to_string());
  }
  MOE_RETURN_IF_ERROR(check_dtype(op, "ids", ids, DType::kI32));
  if (ids.ndim() != 1)
    return invalid_argument_error(op, ": ids must be [N], got ", ids.to_string());
  if (!ids.is_host()) return unsupported_device(op, ids);
  MOE_RETURN_IF_ERROR(check_same_dtype(op, table, rows_name, rows));
  MOE_RETURN_IF_ERROR(check_shape(op, rows_name, rows, Shape{ids.dim(0), table.dim(1)}));
  const int32_t* p = ids.data<int32_t>();
  for (int64_t n = 0; n < ids.numel(); ++n) {
    if (p[n] < 0 || p[n] >= table.dim(0)) {
      return invalid_argument_error(op, ": ids: id ", p[n], " at position ", n,
                                    " is outside the vocabulary [0, ", table.dim(0), ")");
    }
  }
  return Status::OK();
}

}  // namespace

Status embedding_forward(const TensorView& ids, const TensorView& table, const TensorView& out,
                         Stream stream) {
  constexpr const char* kOp = "embedding_forward";
  MOE_RETURN_IF_ERROR(check_args(kOp, ids, table, "table", out, "out"));
  return dispatch_host_float(kOp, table, [&](auto tag) {
    using T = decltype(tag);
    ref::embedding_forward<T>(ids.data<int32_t>(), ids.numel(), table.data<T>(), table.dim(1),
                              out.data<T>());
  });
}

Status embedding_backward(const TensorView& ids, const TensorView& d_out, const TensorView& d_table,
                          Stream stream) {
  constexpr const char* kOp = "embedding_backward";
  MOE_RETURN_IF_ERROR(check_args(kOp, ids, d_table, "d_table", d_out, "d_out"));
  return dispatch_host_float(kOp, d_table, [&](auto tag) {
    using T = decltype(tag);
    ref::embedding_backward<T>(ids.data<int32_t>(), ids.numel(), d_out.data<T>(), d_table.dim(1),
                               d_table.data<T>());
  });
}

}  // namespace moe::kernels
