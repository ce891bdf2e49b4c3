#include "kernels/gemm.h"

#include <algorithm>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/common.h"
#include "kernels/cpu/blas_ref.h"
#include "kernels/cuda/gemm.h"

namespace moe::kernels {
namespace {

// A and B share a float dtype; C is A's dtype or f32 for bf16 inputs.
Status check_operands(const Context& ctx, const char* op, const TensorView& a, const char* b_name,
                      const TensorView& b, const char* c_name, const TensorView& c) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, "a", a));
  MOE_RETURN_IF_ERROR(check_same_dtype(op, a, b_name, b));
  MOE_RETURN_IF_ERROR(check_device(ctx, op, c_name, c));
  const bool same = c.dtype() == a.dtype();
  const bool widened = a.dtype() == DType::kBF16 && c.dtype() == DType::kF32;
  if (!same && !widened) {
    return invalid_argument_error(op, ": ", c_name, " has dtype ", dtype_name(c.dtype()), " for ",
                                  dtype_name(a.dtype()), " operands (expected ",
                                  dtype_name(a.dtype()),
                                  a.dtype() == DType::kBF16 ? " or f32)" : ")");
  }
  return Status::OK();
}

// Calls f(T{}, C{}) for the operand and output types.
template <typename Fn>
Status dispatch_gemm(const char* op, const TensorView& a, const TensorView& c, Fn&& f) {
  if (a.dtype() == DType::kBF16 && c.dtype() == DType::kF32) {
    f(bf16{}, float{});
    return Status::OK();
  }
  return dispatch_float(op, a, [&](auto tag) { f(tag, tag); });
}

}  // namespace

Status gemm(Context& ctx, const TensorView& a, bool trans_a, const TensorView& b, bool trans_b,
            const TensorView& c, double alpha, double beta) {
  constexpr const char* kOp = "gemm";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_operands(ctx, kOp, a, "b", b, "c", c));
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
  MOE_ON_CUDA(ctx, cuda::gemm(ctx, a, trans_a, b, trans_b, c, alpha, beta));
  return dispatch_gemm(kOp, a, c, [&](auto tt, auto ct) {
    using T = decltype(tt);
    using C = decltype(ct);
    ref::gemm_mixed<T, C>(trans_a, trans_b, m, n, k, alpha, a.data<T>(), a.dim(1), b.data<T>(),
                          b.dim(1), beta, c.data<C>(), n);
  });
}

Status expert_gemm(Context& ctx, const TensorView& x, const TensorView& w, bool trans_w,
                   const TensorView& y, const ExpertBlocks& blocks) {
  constexpr const char* kOp = "expert_gemm";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "w", w));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "y", y));
  if (x.ndim() != 2 || w.ndim() != 3 || y.ndim() != 2) {
    return invalid_argument_error(kOp, ": needs x [M, K], w [E_l, K, N], y [M, N]; got ",
                                  x.to_string(), ", ", w.to_string(), ", ", y.to_string());
  }
  const int64_t k = x.dim(1);
  const int64_t n = trans_w ? w.dim(1) : w.dim(2);
  const int64_t kw = trans_w ? w.dim(2) : w.dim(1);
  if (k != kw || y.dim(0) != x.dim(0) || y.dim(1) != n || w.dim(0) != blocks.local_experts) {
    return invalid_argument_error(kOp, ": shapes do not chain: x ", x.shape().to_string(), ", w ",
                                  w.shape().to_string(), (trans_w ? " (transposed)" : ""), ", y ",
                                  y.shape().to_string(), " with ", blocks.local_experts,
                                  " local experts");
  }
  MOE_RETURN_IF_ERROR(validate_blocks(kOp, blocks, x));
  MOE_ON_CUDA(ctx, cuda::expert_gemm(ctx, x, w, trans_w, y, blocks));
  return dispatch_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pw = w.data<T>();
    T* py = y.data<T>();
    const int64_t w_stride = w.dim(1) * w.dim(2);
    // One whole BLAS call per block, the blocks spread over the threads.
    ref::ScopedGemmTimer timer(2.0 * static_cast<double>(blocks.rows()) * n * k);
    parallel_for(blocks.blocks(), 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const auto [begin, end] = blocks.block_rows(b);
        const int64_t used = filled_rows(blocks, b);
        if (used > 0) {
          ref::gemm_mixed<T, T>(false, trans_w, used, n, k, 1.0, px + begin * k, k,
                                pw + blocks.expert_of(b) * w_stride, w.dim(2), 0.0, py + begin * n,
                                n);
        }
        std::fill(py + (begin + used) * n, py + end * n, T(0));
      }
    });
  });
}

Status expert_gemm_wgrad(Context& ctx, const TensorView& x, const TensorView& dy,
                         const TensorView& dw, const ExpertBlocks& blocks) {
  constexpr const char* kOp = "expert_gemm_wgrad";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_operands(ctx, kOp, x, "dy", dy, "dw", dw));
  if (x.ndim() != 2 || dy.ndim() != 2 || dw.ndim() != 3 || x.dim(0) != dy.dim(0) ||
      dw.dim(0) != blocks.local_experts || dw.dim(1) != x.dim(1) || dw.dim(2) != dy.dim(1)) {
    return invalid_argument_error(kOp, ": needs x [M, K], dy [M, N], dw [E_l, K, N]; got ",
                                  x.to_string(), ", ", dy.to_string(), ", ", dw.to_string());
  }
  MOE_RETURN_IF_ERROR(validate_blocks(kOp, blocks, x));
  MOE_ON_CUDA(ctx, cuda::expert_gemm_wgrad(ctx, x, dy, dw, blocks));
  return dispatch_gemm(kOp, x, dw, [&](auto tt, auto ct) {
    using T = decltype(tt);
    using C = decltype(ct);
    const int64_t k = x.dim(1), n = dy.dim(1), experts = blocks.local_experts;
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    C* pdw = dw.data<C>();
    // Experts in parallel; an expert's blocks (one per source rank) add to its dW in rank order.
    ref::ScopedGemmTimer timer(2.0 * static_cast<double>(blocks.rows()) * n * k);
    parallel_for(experts, 1, [&](int64_t e0, int64_t e1) {
      for (int64_t e = e0; e < e1; ++e) {
        for (int64_t b = e; b < blocks.blocks(); b += experts) {
          const int64_t used = filled_rows(blocks, b);
          if (used == 0) continue;  // an expert that received no rows: nothing to add
          const int64_t begin = blocks.block_rows(b).first;
          ref::gemm_mixed<T, C>(true, false, k, n, used, 1.0, px + begin * k, k, pdy + begin * n, n,
                                1.0, pdw + e * k * n, n);
        }
      }
    });
  });
}

ExpertGemmPaths expert_gemm_paths() {
#if defined(MOE_WITH_CUDA)
  return cuda::expert_gemm_paths();
#else
  return ExpertGemmPaths();
#endif
}

}  // namespace moe::kernels
