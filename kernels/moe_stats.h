// Router and layer statistics of the MoE layer (spec/sparsemixer-acmoe.md section D,
// spec/momentum-smoe.md 8.2), accumulated into device f64 slots of the step's statistics buffer
// so that the trainer reads them back once per step. Every op adds (+=) unless noted.
#pragma once

#include "base/context.h"
#include "base/tensor.h"
#include "types/router_stats.h"  // kAcStatsFixed

namespace moe::kernels {

// out[0] += sum_t -sum_e p log p over rows of probs [T, E] F (0 log 0 = 0).
Status entropy_sum(Context& ctx, const TensorView& probs, const TensorView& out);
// out[0] += sum_t ||x[t, :]||_2 over rows of x [T, D] (any float dtype).
Status row_norm_sum(Context& ctx, const TensorView& x, const TensorView& out);
// out[0] += sum_t x[t, col] for x [T, K] F (the top-1 gate sum with col = 0).
Status column_sum(Context& ctx, const TensorView& x, int64_t col, const TensorView& out);
// out[i] += counts[i]: counts i64 [N], out f64 [N].
Status accumulate_counts(Context& ctx, const TensorView& counts, const TensorView& out);
// out[0] += #(a[i] != b[i]) for a, b i32 [N] (routing flips on the probe batch).
Status count_mismatches(Context& ctx, const TensorView& a, const TensorView& b,
                        const TensorView& out);
// SparseMixer: out f64 [4] += (sum of unmasked experts per token, tokens whose mask keeps one
// expert, tokens whose sample is not the argmax, tokens whose gate was halved (c != 1)).
// mask [T, E] u8; is_argmax [T] u8; scale [T] F.
Status sparsemixer_stats(Context& ctx, const TensorView& mask, const TensorView& is_argmax,
                         const TensorView& scale, const TensorView& out);
// AC router, over one call (micro-batch): out f64 [2E + kAcStatsFixed] with
//   [0, E)    cluster_size += local_counts (this rank's tokens per cluster)
//   [E, 2E)   dispersion += local_counts[k] * mean_q (abs_dev[k, q] / counts[k]) (counts > 0)
//   [2E]      tiny clusters += summary[0]
//   [2E + 1]  min of the metric (over calls), [2E + 2] max, [2E + 3] mean (the last call's)
//   [2E + 4]  calls += 1
// abs_dev [E, D] f64 and counts [E] i64 are the statistics the metric was built from (global
// over ranks, or this rank's); local_counts [E] i64 this rank's; summary f64 [5] from ac_metric.
Status ac_stats(Context& ctx, const TensorView& abs_dev, const TensorView& counts,
                const TensorView& local_counts, const TensorView& summary, const TensorView& out);

}  // namespace moe::kernels
