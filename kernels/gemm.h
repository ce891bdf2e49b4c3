// Matrix products on views: cuBLAS on the GPU (CUDA backend), CBLAS on the host.
//
// All matrices are row-major. `trans_x` means the stored matrix is the transpose of the operand.
// Outputs are C = alpha * op(A) op(B) + beta * C: beta = 0 overwrites, beta = 1 accumulates.
// Dtypes: A and B share one float dtype (f32, f64 or bf16); C has that dtype, or f32 when A and
// B are bf16 (an fp32 result: weight gradients into fp32 gradients, logits for the loss).
// Accumulation is f32 for bf16 and f32 inputs, f64 for f64.
#pragma once

#include "base/context.h"
#include "base/tensor.h"
#include "kernels/expert_blocks.h"
#include "kernels/expert_gemm_path.h"

namespace moe::kernels {

// a: [M, K] or [K, M] (trans_a); b: [K, N] or [N, K] (trans_b); c: [M, N].
Status gemm(Context& ctx, const TensorView& a, bool trans_a, const TensorView& b, bool trans_b,
            const TensorView& c, double alpha = 1.0, double beta = 0.0);

// The experts' product over blocks (kernels/expert_blocks.h): for every block b,
//   y[rows of b] = x[rows of b] op(w[expert_of(b)])      (overwritten)
// x: [M, K]; w: [E_l, K, N] (or [E_l, N, K] with trans_w); y: [M, N]; M = blocks.rows().
// Capacity mode: padding rows of y are zero on the host backend.
Status expert_gemm(Context& ctx, const TensorView& x, const TensorView& w, bool trans_w,
                   const TensorView& y, const ExpertBlocks& blocks);
// The experts' weight gradient: dw[l] += sum over l's blocks (rank order) of
//   x[rows of b]^T dy[rows of b].
// x: [M, K]; dy: [M, N]; dw: [E_l, K, N], accumulated (f32 when x and dy are bf16).
Status expert_gemm_wgrad(Context& ctx, const TensorView& x, const TensorView& dy,
                         const TensorView& dw, const ExpertBlocks& blocks);

// How a GPU has run its dropless expert products in this process, per group of two or more
// (kernels/cuda/cublas_gemm.cuh run_gemm_group): as one grouped cuBLAS call; one by one because
// cuBLAS refused them, because an operand was not 16-byte aligned, or because the loop path was
// chosen (expert_gemm_path). All zero without CUDA.
struct ExpertGemmPaths {
  int64_t grouped = 0, refused = 0, unaligned = 0, looped = 0;
};
ExpertGemmPaths expert_gemm_paths();

}  // namespace moe::kernels
