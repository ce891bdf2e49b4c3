// The CUDA kernels of ac_router.cu: the Adaptive Clustering router's cluster statistics and metric.
// Called by the public entry points (kernels/*.cc) after they have validated every view; each
// only enqueues on ctx.stream() and returns launch errors (kernels/cuda/README.md). Host-only:
// no CUDA types, so the CPU build includes it too.
#pragma once

#include "base/context.h"
#include "kernels/router.h"

namespace moe::kernels::cuda {

Status ac_cluster_sums(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& sums, const TensorView& counts);
Status ac_cluster_abs_dev(Context& ctx, const TensorView& x, const TensorView& labels,
                          const TensorView& sums, const TensorView& counts,
                          const TensorView& abs_dev);
Status ac_metric(Context& ctx, const AcRouterParams& params, const TensorView& abs_dev,
                 const TensorView& counts, const TensorView& metric, const TensorView& summary);
Status ac_apply_metric(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& metric, const TensorView& out);
Status ac_apply_metric_backward(Context& ctx, const TensorView& d_out, const TensorView& labels,
                                const TensorView& metric, const TensorView& dx);
Status normalize_columns(Context& ctx, const TensorView& w, const TensorView& out,
                         const TensorView& inv_norm);
Status normalize_columns_backward(Context& ctx, const TensorView& d_out, const TensorView& out,
                                  const TensorView& inv_norm, const TensorView& dw);
Status argmax_rows(Context& ctx, const TensorView& logits, const TensorView& top1);

}  // namespace moe::kernels::cuda
