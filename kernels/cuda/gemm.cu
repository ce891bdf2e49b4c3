// Matrix products with cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx). Row-major operands are
// passed as their column-major transposes: C = op(A) op(B) (row-major) is C^T = op(B)^T op(A)^T.
// f32 computes in f32 (CUBLAS_COMPUTE_32F: no TF32, so FP32 runs track the CPU), f64 in f64, bf16
// inputs in f32 with a bf16 or f32 output.
#include <cublas_v2.h>

#include "kernels/common.h"
#include "kernels/cuda/cublas_gemm.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"

namespace moe::kernels::cuda {
namespace {

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::kF64:
      return CUDA_R_64F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

const char* bytes(const TensorView& t, int64_t elements) {
  return static_cast<const char*>(t.raw()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}
char* bytes_mut(const TensorView& t, int64_t elements) {
  return static_cast<char*>(t.raw()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace

Status run_gemm(Context& ctx, const char* op, DType in, DType out, const GemmCall& g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0) return Status::OK();
  auto handle = static_cast<cublasHandle_t>(ctx.blas_handle());
  const cudaDataType_t ti = cuda_type(in), to = cuda_type(out);
  const bool f64 = in == DType::kF64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const double alpha_d = g.alpha, beta_d = g.beta;
  const float alpha_f = static_cast<float>(g.alpha), beta_f = static_cast<float>(g.beta);
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  // Column-major: C^T [n, m] = op(B)^T [n, k] op(A)^T [k, m].
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (g.k == 0 && g.beta == 1.0) return Status::OK();
  cublasStatus_t st;
  if (g.batch == 1) {
    st = cublasGemmEx(handle, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m),
                      static_cast<int>(g.k), alpha, g.b, ti, static_cast<int>(g.ldb), g.a, ti,
                      static_cast<int>(g.lda), beta, g.c, to, static_cast<int>(g.ldc), compute,
                      CUBLAS_GEMM_DEFAULT);
  } else {
    st = cublasGemmStridedBatchedEx(
        handle, op_b, op_a, static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k),
        alpha, g.b, ti, static_cast<int>(g.ldb), g.stride_b, g.a, ti, static_cast<int>(g.lda),
        g.stride_a, beta, g.c, to, static_cast<int>(g.ldc), g.stride_c, static_cast<int>(g.batch),
        compute, CUBLAS_GEMM_DEFAULT);
  }
  if (st != CUBLAS_STATUS_SUCCESS) {
    return internal_error("cublas: ", op, ": ", cublasGetStatusString(st), " (m ", g.m, ", n ", g.n,
                          ", k ", g.k, ", batch ", g.batch, ")");
  }
  return Status::OK();
}

Status gemm(Context& ctx, const TensorView& a, bool trans_a, const TensorView& b, bool trans_b,
            const TensorView& c, double alpha, double beta) {
  GemmCall g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = c.dim(0);
  g.n = c.dim(1);
  g.k = trans_a ? a.dim(0) : a.dim(1);
  g.a = a.raw();
  g.lda = a.dim(1);
  g.b = b.raw();
  g.ldb = b.dim(1);
  g.c = c.raw();
  g.ldc = g.n;
  g.alpha = alpha;
  g.beta = beta;
  if (g.k == 0 && beta != 1.0) {
    // cuBLAS leaves C alone for k = 0 only when beta = 1: scale it as the product would.
    return beta == 0.0 ? ctx.zero(c) : scale(ctx, c, beta);
  }
  return run_gemm(ctx, "gemm", a.dtype(), c.dtype(), g);
}

// Capacity mode: block b = r * E_l + l holds C rows for expert l, so the blocks of one source
// rank r form a strided batch over the experts (x and y stride C rows, w strides one expert).
// Padding rows are computed (their input rows are zero). Dropless: one product per non-empty
// block.
Status expert_gemm(Context& ctx, const TensorView& x, const TensorView& w, bool trans_w,
                   const TensorView& y, const ExpertBlocks& blocks) {
  const int64_t k = x.dim(1), n = y.dim(1), el = blocks.local_experts;
  GemmCall g;
  g.trans_b = trans_w;
  g.n = n;
  g.k = k;
  g.lda = k;
  g.ldb = w.dim(2);
  g.ldc = n;
  if (k == 0) return ctx.zero(y);
  if (blocks.capacity >= 0) {
    const int64_t cap = blocks.capacity;
    g.m = cap;
    g.batch = el;
    g.stride_a = cap * k;
    g.stride_b = w.dim(1) * w.dim(2);
    g.stride_c = cap * n;
    g.b = w.raw();
    for (int64_t r = 0; r < blocks.ranks; ++r) {
      g.a = bytes(x, r * el * cap * k);
      g.c = bytes_mut(y, r * el * cap * n);
      MOE_RETURN_IF_ERROR(run_gemm(ctx, "expert_gemm", x.dtype(), y.dtype(), g));
    }
    return Status::OK();
  }
  for (int64_t b = 0; b < blocks.blocks(); ++b) {
    const auto [begin, end] = blocks.block_rows(b);
    if (end == begin) continue;
    g.m = end - begin;
    g.a = bytes(x, begin * k);
    g.b = bytes(w, blocks.expert_of(b) * w.dim(1) * w.dim(2));
    g.c = bytes_mut(y, begin * n);
    MOE_RETURN_IF_ERROR(run_gemm(ctx, "expert_gemm", x.dtype(), y.dtype(), g));
  }
  return Status::OK();
}

// dw[l] += x_b^T dy_b over l's blocks in rank order (a fixed order: deterministic). Capacity
// mode: one strided batch over the experts per source rank; padding rows add zero (their output
// gradient is zero).
Status expert_gemm_wgrad(Context& ctx, const TensorView& x, const TensorView& dy,
                         const TensorView& dw, const ExpertBlocks& blocks) {
  const int64_t k = x.dim(1), n = dy.dim(1), el = blocks.local_experts;
  GemmCall g;
  g.trans_a = true;
  g.m = k;
  g.n = n;
  g.lda = k;
  g.ldb = n;
  g.ldc = n;
  g.beta = 1.0;
  if (blocks.capacity >= 0) {
    const int64_t cap = blocks.capacity;
    if (cap == 0) return Status::OK();
    g.k = cap;
    g.batch = el;
    g.stride_a = cap * k;
    g.stride_b = cap * n;
    g.stride_c = k * n;
    g.c = dw.raw();
    for (int64_t r = 0; r < blocks.ranks; ++r) {
      g.a = bytes(x, r * el * cap * k);
      g.b = bytes(dy, r * el * cap * n);
      MOE_RETURN_IF_ERROR(run_gemm(ctx, "expert_gemm_wgrad", x.dtype(), dw.dtype(), g));
    }
    return Status::OK();
  }
  for (int64_t b = 0; b < blocks.blocks(); ++b) {
    const auto [begin, end] = blocks.block_rows(b);
    if (end == begin) continue;
    g.k = end - begin;
    g.a = bytes(x, begin * k);
    g.b = bytes(dy, begin * n);
    g.c = bytes_mut(dw, blocks.expert_of(b) * k * n);
    MOE_RETURN_IF_ERROR(run_gemm(ctx, "expert_gemm_wgrad", x.dtype(), dw.dtype(), g));
  }
  return Status::OK();
}

}  // namespace moe::kernels::cuda
