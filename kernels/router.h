// Routing ops of the MoE layer: top-k softmax with deterministic ties, SparseMixer's masked softmax
// and sampling, capacity slot assignment, the load-balancing and z losses, and the Adaptive
// Clustering (AC) metric. Logits and probabilities are f32 (f64 in gradient tests).
//
// Shapes: T tokens, E experts, K top-k, D model width. Index tensors are i32.
#pragma once

#include <vector>

#include "core/base/device.h"
#include "core/base/moe_config.h"
#include "core/base/rng.h"
#include "core/base/tensor.h"

namespace moe::kernels {

// --- Top-k softmax (spec/momentum-smoe.md Eq. 1-2) -------------------------------------------
// For each token: idx[t, :] = the K largest logits in descending order (ties: lower expert index
// first), gate[t, :] = softmax over those K logits only, probs[t, :] = softmax over all E (for the
// balance loss and entropy), lse[t] = logsumexp over all E. All outputs overwritten.
//   logits [T, E]; idx [T, K] i32; gate [T, K]; probs [T, E]; lse [T].
Status topk_softmax(const TensorView& logits, const TensorView& idx, const TensorView& gate,
                    const TensorView& probs, const TensorView& lse, Stream stream = {});
// d_logits[t, idx[t, j]] += gate_j (d_gate_j - sum_i gate_i d_gate_i). Accumulates.
Status topk_softmax_backward(const TensorView& d_gate, const TensorView& gate,
                             const TensorView& idx, const TensorView& d_logits,
                             Stream stream = {});

// --- SparseMixer top-1 (spec/sparsemixer-acmoe.md A.3-A.5) -----------------------------------
struct SparseMixerRouteArgs {
  SparseMixerParams params;
  bool training = true;    // false: D = argmax, c = 1
  CounterRng rng;          // Gumbel sample and midpoint coin
  int64_t token_offset = 0;  // global id of token 0 (keys the draws, independent of layout)
};
// idx [T, 1] = sampled (training) or argmax expert; gate [T, 1] = c * pi_D; probs [T, E] = the
// masked softmax pi; lse [T] = logsumexp over all E of the unmasked logits (z-loss);
// mask [T, E] u8 = Delta; scale [T] = c (1 or 1/2); is_argmax [T] u8 = delta_D. Overwrites all.
Status sparsemixer_route(const SparseMixerRouteArgs& args, const TensorView& logits,
                         const TensorView& idx, const TensorView& gate, const TensorView& probs,
                         const TensorView& lse, const TensorView& mask, const TensorView& scale,
                         const TensorView& is_argmax, Stream stream = {});
// d_gate [T, 1] is s = dL/d(c pi_D). The gate-gradient rule turns it into dL/dpi_D (2 s, or
// (1 + c) s), then through the masked softmax: d_logits[t, j] += dpi * pi_D (1[j = D] - pi_j)
// Delta_j. Accumulates into d_logits.
Status sparsemixer_backward(SparseMixerGateGrad rule, const TensorView& d_gate,
                            const TensorView& idx, const TensorView& probs,
                            const TensorView& mask, const TensorView& scale,
                            const TensorView& d_logits, Stream stream = {});

// --- Capacity (DESIGN.md step 3) -------------------------------------------------------------
// Assigns slots in a stable order: all first choices in token order, then all second choices, ...
// slot[t, k] = position of (t, k) in expert idx[t, k]'s buffer, or -1 when it is past `capacity`
// (capacity < 0: dropless, nothing dropped). load[e] = assignments to e before capacity (i64 [E]);
// kept[e] = min(load[e], capacity). Overwrites slot, load, kept.
Status assign_capacity(const TensorView& idx, int64_t num_experts, int64_t capacity,
                       const TensorView& slot, const TensorView& load, const TensorView& kept,
                       Stream stream = {});

// --- Auxiliary losses --------------------------------------------------------------------------
// The sums the auxiliary losses are made of, over this rank's tokens; ranks add them up for the
// global scope. prob_sum[e] = sum_t probs[t, e]; lse_sq_sum = sum_t lse[t]^2.
struct AuxSums {
  std::vector<double> prob_sum;  // [E]
  double lse_sq_sum = 0;
};
StatusOr<AuxSums> aux_sums(const TensorView& probs, const TensorView& lse);

// Switch balance loss E * sum_e f_e P_e with f_e = load[e] / (T K) (no gradient) and
// P_e = prob_sum[e] / T; z-loss lse_sq_sum / T. T = `tokens` (this rank's or the global count),
// load [E] i64 over the same tokens. Unweighted.
struct AuxLosses {
  double balance = 0;
  double z = 0;
};
AuxLosses aux_losses(const AuxSums& sums, const std::vector<int64_t>& load, int64_t tokens,
                     int64_t top_k);
// Gradient of the losses above w.r.t. this rank's logits, with T = `tokens` and the same `load`:
// d_logits += balance_weight * dBalance/dlogits (through `probs`, which is the full or masked
// softmax of the logits) + z_weight * dZ/dlogits (through softmax(logits) = exp(logits - lse)).
Status aux_losses_backward(const TensorView& logits, const TensorView& probs,
                           const std::vector<int64_t>& load, int64_t tokens,
                           const TensorView& lse, int64_t top_k, double balance_weight,
                           double z_weight, const TensorView& d_logits, Stream stream = {});

// --- Adaptive Clustering metric (spec/sparsemixer-acmoe.md B.3, B.7, B.9) --------------------
// Pass 1: per-cluster sums of x and counts, clusters given by labels [T] i32 in [0, E).
//   sums [E, D] and counts [E] (f64 accumulators, i64) are overwritten.
Status ac_cluster_sums(const TensorView& x, const TensorView& labels, const TensorView& sums,
                       const TensorView& counts, Stream stream = {});
// Pass 2: per-cluster sums of |x - mean_k| where mean_k = sums_k / counts_k. abs_dev [E, D] f64,
// overwritten. (Between the passes, sums and counts may be all-reduced for global statistics.)
Status ac_cluster_abs_dev(const TensorView& x, const TensorView& labels, const TensorView& sums,
                          const TensorView& counts, const TensorView& abs_dev,
                          Stream stream = {});
// The metric M [E, D] (same dtype as the router): mad = abs_dev / count; W = 1 / (mad + eps);
// clusters with count < min_cluster_size get W = 1 and are left out of the normalisation; then the
// paper or reference-code normalisation. Overwrites metric; fills the clipped fraction.
struct AcMetricSummary {
  int64_t tiny_clusters = 0;
  double clipped_fraction = 0;  // reference-code clip only
  double min = 0, max = 0, mean = 0;
};
StatusOr<AcMetricSummary> ac_metric(const AcRouterParams& params, const TensorView& abs_dev,
                                    const TensorView& counts, const TensorView& metric);
// out[t, :] = x[t, :] * metric[labels[t], :] (the router input). Overwrites out.
Status ac_apply_metric(const TensorView& x, const TensorView& labels, const TensorView& metric,
                       const TensorView& out, Stream stream = {});
// dx[t, :] += d_out[t, :] * metric[labels[t], :] (no gradient reaches the metric). Accumulates.
Status ac_apply_metric_backward(const TensorView& d_out, const TensorView& labels,
                                const TensorView& metric, const TensorView& dx,
                                Stream stream = {});

// top1[t] = argmax_e logits[t, e], lowest index on ties. logits [T, E]; top1 [T] i32.
Status argmax_rows(const TensorView& logits, const TensorView& top1, Stream stream = {});

// --- Statistics helpers ------------------------------------------------------------------------
// sum_t -sum_e p log p over rows of probs [T, E].
StatusOr<double> entropy_sum(const TensorView& probs);
// sum_t ||x[t, :]||_2 over rows of x [T, D].
StatusOr<double> row_norm_sum(const TensorView& x);

}  // namespace moe::kernels
