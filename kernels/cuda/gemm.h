// The CUDA kernels of gemm.cu: dense and per-expert GEMMs on cuBLAS. (cuBLAS)
// Called by the public entry points (kernels/*.cc) after they have validated every view; each
// only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/expert_blocks.h"
#include "kernels/gemm.h"

namespace moe::kernels::cuda {

Status gemm(Context& ctx, const TensorView& a, bool trans_a, const TensorView& b, bool trans_b,
            const TensorView& c, double alpha, double beta);
Status expert_gemm(Context& ctx, const TensorView& x, const TensorView& w, bool trans_w,
                   const TensorView& y, const ExpertBlocks& blocks);
Status expert_gemm_wgrad(Context& ctx, const TensorView& x, const TensorView& dy,
                         const TensorView& dw, const ExpertBlocks& blocks);
ExpertGemmPaths expert_gemm_paths();

}  // namespace moe::kernels::cuda
