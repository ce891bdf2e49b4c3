#include "kernels/moe_dispatch.h"

#include <cstring>

#include "kernels/common.h"

namespace moe::kernels {
namespace {

Status check_index(const char* op, const TensorView& index, int64_t rows, int64_t limit) {
  MOE_RETURN_IF_ERROR(check_dtype(op, "index", index, DType::kI32));
  MOE_RETURN_IF_ERROR(check_shape(op, "index", index, Shape{rows}));
  const int32_t* p = index.data<int32_t>();
  for (int64_t i = 0; i < rows; ++i) {
    if (p[i] >= limit) {
      return invalid_argument_error(op, ": index[", i, "] = ", p[i], " >= ", limit);
    }
  }
  return Status::OK();
}

Status check_combine(const char* op, const TensorView& y, const TensorView& row,
                     const TensorView& gate, const TensorView& omega, const TensorView& u) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "y", y));
  MOE_RETURN_IF_ERROR(check_same_dtype(op, y, "gate", gate));
  MOE_RETURN_IF_ERROR(check_same_dtype(op, y, "u", u));
  if (y.ndim() != 2 || row.ndim() != 2 || u.ndim() != 2 || u.dim(1) != y.dim(1)) {
    return invalid_argument_error(op, ": needs y [M, D], row [T, K], u [T, D]; got ",
                                  y.to_string(), ", ", row.to_string(), ", ", u.to_string());
  }
  MOE_RETURN_IF_ERROR(check_dtype(op, "row", row, DType::kI32));
  MOE_RETURN_IF_ERROR(check_shape(op, "row", row, Shape{u.dim(0), row.dim(1)}));
  MOE_RETURN_IF_ERROR(check_shape(op, "gate", gate, row.shape()));
  if (omega.numel() > 0) {
    MOE_RETURN_IF_ERROR(check_same_dtype(op, y, "omega", omega));
    MOE_RETURN_IF_ERROR(check_shape(op, "omega", omega, Shape{y.dim(1)}));
  }
  const int32_t* r = row.data<int32_t>();
  for (int64_t i = 0; i < row.numel(); ++i) {
    if (r[i] >= y.dim(0)) {
      return invalid_argument_error(op, ": row ", r[i], " of slot ", i, " >= ", y.dim(0));
    }
  }
  return Status::OK();
}

}  // namespace

Status gather_rows(const TensorView& src, const TensorView& index, const TensorView& dst,
                   Stream stream) {
  constexpr const char* kOp = "gather_rows";
  if (!src.is_host()) return unsupported_device(kOp, src);
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, src, "dst", dst));
  if (src.ndim() != 2 || dst.ndim() != 2 || src.dim(1) != dst.dim(1)) {
    return invalid_argument_error(kOp, ": needs src [N, D] and dst [M, D], got ",
                                  src.to_string(), ", ", dst.to_string());
  }
  MOE_RETURN_IF_ERROR(check_index(kOp, index, dst.dim(0), src.dim(0)));
  const size_t row_bytes = static_cast<size_t>(src.dim(1)) * dtype_size(src.dtype());
  const char* s = static_cast<const char*>(src.raw());
  char* d = static_cast<char*>(dst.raw());
  const int32_t* idx = index.data<int32_t>();
  for (int64_t i = 0; i < dst.dim(0); ++i) {
    if (idx[i] < 0) {
      std::memset(d + i * row_bytes, 0, row_bytes);
    } else {
      std::memcpy(d + i * row_bytes, s + idx[i] * row_bytes, row_bytes);
    }
  }
  return Status::OK();
}

Status scatter_add_rows(const TensorView& src, const TensorView& index, const TensorView& dst,
                        Stream stream) {
  constexpr const char* kOp = "scatter_add_rows";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "src", src));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, src, "dst", dst));
  if (src.ndim() != 2 || dst.ndim() != 2 || src.dim(1) != dst.dim(1)) {
    return invalid_argument_error(kOp, ": needs src [M, D] and dst [N, D], got ",
                                  src.to_string(), ", ", dst.to_string());
  }
  MOE_RETURN_IF_ERROR(check_index(kOp, index, src.dim(0), dst.dim(0)));
  return dispatch_host_float(kOp, src, [&](auto tag) {
    using T = decltype(tag);
    const int64_t d = src.dim(1);
    const T* s = src.data<T>();
    T* o = dst.data<T>();
    const int32_t* idx = index.data<int32_t>();
    for (int64_t i = 0; i < src.dim(0); ++i) {
      if (idx[i] < 0) continue;
      T* out = o + static_cast<int64_t>(idx[i]) * d;
      for (int64_t q = 0; q < d; ++q) out[q] += s[i * d + q];
    }
  });
}

Status combine(const TensorView& y, const TensorView& row, const TensorView& gate,
               const TensorView& omega, const TensorView& u, Stream stream) {
  constexpr const char* kOp = "combine";
  MOE_RETURN_IF_ERROR(check_combine(kOp, y, row, gate, omega, u));
  return dispatch_host_float(kOp, y, [&](auto tag) {
    using T = decltype(tag);
    const int64_t tokens = u.dim(0), k = row.dim(1), d = y.dim(1);
    const T* py = y.data<T>();
    const T* g = gate.data<T>();
    const T* w = omega.numel() > 0 ? omega.data<T>() : nullptr;
    const int32_t* r = row.data<int32_t>();
    T* pu = u.data<T>();
    for (int64_t t = 0; t < tokens; ++t) {
      T* out = pu + t * d;
      for (int64_t q = 0; q < d; ++q) out[q] = T(0);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t rr = r[t * k + j];
        if (rr < 0) continue;
        const T gj = g[t * k + j];
        const T* src = py + static_cast<int64_t>(rr) * d;
        if (w != nullptr) {
          for (int64_t q = 0; q < d; ++q) out[q] += gj * (w[q] * src[q]);
        } else {
          for (int64_t q = 0; q < d; ++q) out[q] += gj * src[q];
        }
      }
    }
  });
}

Status combine_backward(const TensorView& du, const TensorView& y, const TensorView& row,
                        const TensorView& gate, const TensorView& omega, const TensorView& dy,
                        const TensorView& d_gate, const TensorView& d_omega, Stream stream) {
  constexpr const char* kOp = "combine_backward";
  MOE_RETURN_IF_ERROR(check_combine(kOp, y, row, gate, omega, du));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, y, "dy", dy));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "dy", dy, y.shape()));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, y, "d_gate", d_gate));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_gate", d_gate, gate.shape()));
  const bool with_omega = omega.numel() > 0;
  if (with_omega && d_omega.numel() > 0) {
    MOE_RETURN_IF_ERROR(check_same_dtype(kOp, y, "d_omega", d_omega));
    MOE_RETURN_IF_ERROR(check_shape(kOp, "d_omega", d_omega, omega.shape()));
  }
  return dispatch_host_float(kOp, y, [&](auto tag) {
    using T = decltype(tag);
    const int64_t tokens = du.dim(0), k = row.dim(1), d = y.dim(1);
    const T* pdu = du.data<T>();
    const T* py = y.data<T>();
    const T* g = gate.data<T>();
    const T* w = with_omega ? omega.data<T>() : nullptr;
    T* dw = (with_omega && d_omega.numel() > 0) ? d_omega.data<T>() : nullptr;
    const int32_t* r = row.data<int32_t>();
    T* pdy = dy.data<T>();
    T* pdg = d_gate.data<T>();
    for (int64_t i = 0; i < dy.numel(); ++i) pdy[i] = T(0);
    for (int64_t t = 0; t < tokens; ++t) {
      const T* dut = pdu + t * d;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t rr = r[t * k + j];
        if (rr < 0) {
          pdg[t * k + j] = T(0);
          continue;
        }
        const T gj = g[t * k + j];
        const T* src = py + static_cast<int64_t>(rr) * d;
        T* dst = pdy + static_cast<int64_t>(rr) * d;
        double dot = 0;
        for (int64_t q = 0; q < d; ++q) {
          const T wq = w != nullptr ? w[q] : T(1);
          dst[q] = gj * wq * dut[q];
          dot += static_cast<double>(dut[q]) * (wq * src[q]);
          if (dw != nullptr) dw[q] += gj * src[q] * dut[q];
        }
        pdg[t * k + j] = static_cast<T>(dot);
      }
    }
  });
}

}  // namespace moe::kernels
