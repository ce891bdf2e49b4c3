// The CUDA kernels of router.cu: top-k (softmax or sigmoid) and SparseMixer routing, the
// per-sequence routing counts, and the balance, z and sequence-wise balance losses. Called by the
// public entry points (kernels/*.cc) after they have validated every view; each only enqueues on
// ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only: no CUDA types, so
// the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/router.h"

namespace moe::kernels::cuda {

Status topk_route(Context& ctx, const RouteOptions& opt, const TensorView& logits,
                  const TensorView& idx, const TensorView& gate, const TensorView& probs,
                  const TensorView& lse);
Status topk_route_backward(Context& ctx, const RouteOptions& opt, const TensorView& logits,
                           const TensorView& d_gate, const TensorView& gate, const TensorView& idx,
                           const TensorView& d_logits);
Status sequence_counts(Context& ctx, const TensorView& idx, const TensorView& counts);
Status sparsemixer_route(Context& ctx, const SparseMixerRouteArgs& args, const TensorView& logits,
                         const SparseMixerRouteOut& out);
Status sparsemixer_backward(Context& ctx, SparseMixerGateGrad rule, const TensorView& d_gate,
                            const TensorView& idx, const TensorView& probs, const TensorView& mask,
                            const TensorView& scale, const TensorView& d_logits);
Status aux_sums(Context& ctx, const TensorView& probs, const TensorView& lse,
                const TensorView& load, const TensorView& seq_counts, int64_t tokens,
                const TensorView& packed);
Status aux_losses(Context& ctx, const TensorView& packed, const AuxLossWeights& w,
                  const TensorView& losses);
Status aux_losses_backward(Context& ctx, const TensorView& logits, const TensorView& probs,
                           const TensorView& packed, const TensorView& lse,
                           const TensorView& seq_counts, const AuxLossWeights& w,
                           const TensorView& d_logits);

}  // namespace moe::kernels::cuda
