#include "kernels/gemm.h"

#include "kernels/common.h"
#include "kernels/reference/blas_ref.h"

namespace moe::kernels {
namespace {

Status check_offsets(const char* op, const std::vector<int64_t>& offsets, int64_t groups,
                     int64_t rows) {
  if (static_cast<int64_t>(offsets.size()) != groups + 1) {
    return invalid_argument_error(op, ": ", offsets.size(), " offsets for ", groups,
                                  " groups (need groups + 1)");
  }
  if (offsets.front() != 0 || offsets.back() != rows) {
    return invalid_argument_error(op, ": offsets must run from 0 to ", rows, ", got ",
                                  offsets.front(), " .. ", offsets.back());
  }
  for (size_t g = 1; g < offsets.size(); ++g) {
    if (offsets[g] < offsets[g - 1]) {
      return invalid_argument_error(op, ": offsets decrease at group ", g - 1);
    }
  }
  return Status::OK();
}

}  // namespace

Status gemm(const TensorView& a, bool trans_a, const TensorView& b, bool trans_b,
            const TensorView& c, double alpha, double beta, Stream stream) {
  constexpr const char* kOp = "gemm";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "a", a));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, a, "b", b));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, a, "c", c));
  if (a.ndim() != 2 || b.ndim() != 2 || c.ndim() != 2) {
    return invalid_argument_error(kOp, ": needs 2-D operands, got ", a.to_string(), ", ",
                                  b.to_string(), ", ", c.to_string());
  }
  const int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  const int64_t n = trans_b ? b.dim(0) : b.dim(1);
  if (k != kb || c.dim(0) != m || c.dim(1) != n) {
    return invalid_argument_error(kOp, ": shapes do not chain: op(a) [", m, ", ", k, "], op(b) [",
                                  kb, ", ", n, "], c ", c.shape().to_string());
  }
  return dispatch_host_float(kOp, a, [&](auto tag) {
    using T = decltype(tag);
    ref::gemm<T>(trans_a, trans_b, m, n, k, static_cast<T>(alpha), a.data<T>(), a.dim(1),
                 b.data<T>(), b.dim(1), static_cast<T>(beta), c.data<T>(), n);
  });
}

Status grouped_gemm(const TensorView& a, const TensorView& b, bool trans_b, const TensorView& c,
                    const std::vector<int64_t>& offsets, double alpha, double beta,
                    Stream stream) {
  constexpr const char* kOp = "grouped_gemm";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "a", a));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, a, "b", b));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, a, "c", c));
  if (a.ndim() != 2 || b.ndim() != 3 || c.ndim() != 2) {
    return invalid_argument_error(kOp, ": needs a [M, K], b [G, K, N], c [M, N]; got ",
                                  a.to_string(), ", ", b.to_string(), ", ", c.to_string());
  }
  const int64_t groups = b.dim(0);
  const int64_t k = a.dim(1);
  const int64_t n = trans_b ? b.dim(1) : b.dim(2);
  const int64_t kb = trans_b ? b.dim(2) : b.dim(1);
  if (k != kb || c.dim(0) != a.dim(0) || c.dim(1) != n) {
    return invalid_argument_error(kOp, ": shapes do not chain: a ", a.shape().to_string(), ", b ",
                                  b.shape().to_string(), (trans_b ? " (transposed)" : ""), ", c ",
                                  c.shape().to_string());
  }
  MOE_RETURN_IF_ERROR(check_offsets(kOp, offsets, groups, a.dim(0)));
  return dispatch_host_float(kOp, a, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = c.data<T>();
    const int64_t b_stride = b.dim(1) * b.dim(2);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t rows = offsets[g + 1] - offsets[g];
      if (rows == 0) continue;
      ref::gemm<T>(false, trans_b, rows, n, k, static_cast<T>(alpha), pa + offsets[g] * k, k,
                   pb + g * b_stride, b.dim(2), static_cast<T>(beta), pc + offsets[g] * n, n);
    }
  });
}

Status grouped_gemm_wgrad(const TensorView& a, const TensorView& d, const TensorView& c,
                          const std::vector<int64_t>& offsets, double alpha, double beta,
                          Stream stream) {
  constexpr const char* kOp = "grouped_gemm_wgrad";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "a", a));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, a, "d", d));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, a, "c", c));
  if (a.ndim() != 2 || d.ndim() != 2 || c.ndim() != 3 || a.dim(0) != d.dim(0) ||
      c.dim(1) != a.dim(1) || c.dim(2) != d.dim(1)) {
    return invalid_argument_error(kOp, ": needs a [M, K], d [M, N], c [G, K, N]; got ",
                                  a.to_string(), ", ", d.to_string(), ", ", c.to_string());
  }
  const int64_t groups = c.dim(0);
  MOE_RETURN_IF_ERROR(check_offsets(kOp, offsets, groups, a.dim(0)));
  return dispatch_host_float(kOp, a, [&](auto tag) {
    using T = decltype(tag);
    const int64_t k = a.dim(1);
    const int64_t n = d.dim(1);
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t rows = offsets[g + 1] - offsets[g];
      T* pc = c.data<T>() + g * k * n;
      if (rows == 0) {
        // An expert that received no rows: the product is zero.
        for (int64_t i = 0; i < k * n; ++i) pc[i] = beta == 0 ? T(0) : static_cast<T>(beta) * pc[i];
        continue;
      }
      ref::gemm<T>(true, false, k, n, rows, static_cast<T>(alpha), a.data<T>() + offsets[g] * k,
                   k, d.data<T>() + offsets[g] * n, n, static_cast<T>(beta), pc, n);
    }
  });
}

}  // namespace moe::kernels
