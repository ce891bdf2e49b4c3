#include "kernels/embedding.h"

#include <cstring>

#include "kernels/common.h"

namespace moe::kernels {
namespace {

Status check_ids(const char* op, const TensorView& ids, const TensorView& rows,
                 const TensorView& table) {
  MOE_RETURN_IF_ERROR(check_dtype(op, "ids", ids, DType::kI32));
  if (table.ndim() != 2 || rows.ndim() != 2 || rows.dim(1) != table.dim(1) ||
      ids.numel() != rows.dim(0)) {
    return invalid_argument_error(op, ": needs ids [N], table [V, D], rows [N, D]; got ",
                                  ids.to_string(), ", ", table.to_string(), ", ", rows.to_string());
  }
  const int32_t* p = ids.data<int32_t>();
  for (int64_t n = 0; n < ids.numel(); ++n) {
    if (p[n] < 0 || p[n] >= table.dim(0)) {
      return invalid_argument_error(op, ": id ", p[n], " at position ", n,
                                    " is outside the vocabulary [0, ", table.dim(0), ")");
    }
  }
  return Status::OK();
}

}  // namespace

Status embedding_forward(const TensorView& ids, const TensorView& table, const TensorView& out,
                         Stream stream) {
  constexpr const char* kOp = "embedding_forward";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "table", table));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, table, "out", out));
  MOE_RETURN_IF_ERROR(check_ids(kOp, ids, out, table));
  const size_t row = static_cast<size_t>(table.dim(1)) * dtype_size(table.dtype());
  const char* src = static_cast<const char*>(table.raw());
  char* dst = static_cast<char*>(out.raw());
  const int32_t* p = ids.data<int32_t>();
  for (int64_t n = 0; n < ids.numel(); ++n) std::memcpy(dst + n * row, src + p[n] * row, row);
  return Status::OK();
}

Status embedding_backward(const TensorView& ids, const TensorView& d_out,
                          const TensorView& d_table, Stream stream) {
  constexpr const char* kOp = "embedding_backward";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "d_table", d_table));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, d_table, "d_out", d_out));
  MOE_RETURN_IF_ERROR(check_ids(kOp, ids, d_out, d_table));
  return dispatch_host_float(kOp, d_table, [&](auto tag) {
    using T = decltype(tag);
    const int64_t d = d_table.dim(1);
    const int32_t* p = ids.data<int32_t>();
    const T* g = d_out.data<T>();
    T* t = d_table.data<T>();
    for (int64_t n = 0; n < ids.numel(); ++n)
      for (int64_t j = 0; j < d; ++j) t[p[n] * d + j] += g[n * d + j];
  });
}

}  // namespace moe::kernels
