// The CUDA kernels of moe_dispatch.cu: the MoE layout (slots, drops) and its deduplication per
// destination rank, dispatch gathers and the weighted combine. Called by the public entry points
// (kernels/*.cc) after they have validated every view; each only enqueues on ctx.stream() and
// returns launch errors (kernels/cuda/README.md). Host-only: no CUDA types, so the CPU build
// includes it too.
#pragma once

#include "base/context.h"
#include "kernels/moe_dispatch.h"

namespace moe::kernels::cuda {

Status moe_layout(Context& ctx, const LayoutArgs& args, const TensorView& idx,
                  const LayoutOut& out);
Status moe_dedup_layout(Context& ctx, const DedupArgs& args, const TensorView& idx,
                        const TensorView& row, const DedupOut& out);
Status block_fill_counts(Context& ctx, const TensorView& keys, const TensorView& filled);
Status gather_rows(Context& ctx, const TensorView& src, const TensorView& index,
                   const TensorView& dst);
Status gather_sum_rows(Context& ctx, const TensorView& src, const TensorView& rows,
                       const TensorView& dst);
Status combine(Context& ctx, const TensorView& y, const TensorView& row, const TensorView& gate,
               const TensorView& omega, const TensorView& u);
Status combine_backward(Context& ctx, const TensorView& du, const TensorView& y,
                        const TensorView& row, const TensorView& gate, const TensorView& omega,
                        const CombineGrads& grads);

}  // namespace moe::kernels::cuda
