// One cuBLAS matrix product on row-major operands, shared by the CUDA kernels that multiply
// (gemm.cu: the dense and expert products; attention.cu: scores and values).
#pragma once

#include <cstdint>
#include <vector>

#include "base/context.h"
#include "base/dtype.h"
#include "base/status.h"

namespace moe::kernels::cuda {

// One (optionally strided-batched) row-major product C = alpha op(A) op(B) + beta C with
// A [m, k] (or [k, m]), B [k, n] (or [n, k]), C [m, n] leading dimensions lda, ldb, ldc.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  double alpha = 1, beta = 0;
};

// C = alpha op(A) op(B) + beta C (row-major), strided-batched when g.batch > 1. `in` is the dtype
// of A and B, `out` of C (f32, f64, bf16; bf16 inputs may write f32). f32 computes in f32 (no
// TF32), f64 in f64, bf16 in f32. Enqueued on ctx's stream; cuBLAS errors name `op` and the shape.
Status run_gemm(Context& ctx, const char* op, DType in, DType out, const GemmCall& g);

// Products that write distinct C's (no order among them), each unbatched, as one grouped cuBLAS
// call (cublasGemmGroupedBatchedEx, one problem per group): the dropless expert blocks, whose
// row counts differ, in one launch instead of one per block, when MOMOE_EXPERT_GEMM=grouped
// (kernels/gemm.h's expert_gemm_path; the default runs them one by one: faster on an H200). Runs
// them one by one otherwise (same products, possibly other cuBLAS kernels): when there is one;
// when an operand or row stride is off a 16-byte boundary (the grouped kernels'
// wide loads); or when cuBLAS refuses the dtype pair (NOT_SUPPORTED: not offered again) or the
// arguments (INVALID_VALUE). kernels/gemm.h's expert_gemm_paths counts each outcome. The device
// array of operand pointers is uploaded on ctx's stream (no wait).
Status run_gemm_group(Context& ctx, const char* op, DType in, DType out,
                      const std::vector<GemmCall>& calls);

}  // namespace moe::kernels::cuda
