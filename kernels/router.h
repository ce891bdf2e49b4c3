// Routing ops of the MoE layer: top-k routing (softmax or sigmoid scores) with deterministic ties,
// SparseMixer's masked softmax and sampling, the load-balancing, z and sequence-wise balance
// losses, and the Adaptive Clustering (AC) metric. The router is full precision always (F: f32, or
// f64 in gradient tests), whatever the activations; AC statistics read the activations (act) and
// accumulate in double.
//
// Shapes: T tokens, E experts, K top-k, D model width. Index tensors are i32. Nothing here
// returns a host value: sums, losses and summaries land in device tensors (f64).
#pragma once

#include "base/context.h"
#include "base/rng.h"
#include "base/tensor.h"
#include "types/moe_config.h"

namespace moe::kernels {

// --- Top-k routing (spec/momentum-smoe.md Eq. 1-2; DeepSeek-V3's sigmoid gate) ---------------
// How topk_route turns a token's logits l [E] into scores, a selection and gates.
struct RouteOptions {
  // Scores s: softmax(l) over the E experts, or sigmoid(l_e) per expert.
  ScoreFunction score = ScoreFunction::kSoftmax;
  // Gates g_j = s_{idx_j} / sum_j' s_{idx_j'} (for softmax: the softmax over the K chosen logits),
  // or the chosen scores themselves; then g_j *= scaling.
  bool renormalize = true;
  double scaling = 1.0;
  // [E] F, or empty: the selection ranks s + selection_bias (loss-free balancing's bias; no
  // gradient reaches it). Softmax without it ranks the logits themselves (the same order as the
  // scores, without their rounding).
  TensorView selection_bias;
  // Group-limited routing: E / groups consecutive experts per group; a token chooses inside its
  // topk_groups best groups, ranked by the sum of each group's group_top largest s (+ bias; 2 in
  // DeepSeek-V3's group-limited routing, ceil(K / M) in its node-limited routing over M nodes).
  // groups must divide E and be <= 64; groups 1 or topk_groups >= groups: no limit.
  int64_t groups = 1;
  int64_t topk_groups = 1;
  int64_t group_top = 2;
};
// For each token: idx[t, :] = the K experts of largest selection key in descending order (ties:
// lower expert index first), gate[t, :] as above, probs[t, :] = the scores as a distribution
// (softmax; sigmoid: s / sum_e s, DeepSeek-V3's normalised affinities), for the balance losses
// and the entropy; lse[t] = logsumexp over all E logits (the z-loss). All outputs overwritten.
//   logits [T, E] F; idx [T, K] i32; gate [T, K] F; probs [T, E] F; lse [T] F.
Status topk_route(Context& ctx, const RouteOptions& opt, const TensorView& logits,
                  const TensorView& idx, const TensorView& gate, const TensorView& probs,
                  const TensorView& lse);
// The gates' gradient into d_logits [T, E] F (accumulates), from d_gate, gate [T, K] F and idx
// [T, K] i32 of the forward, and its logits [T, E] F (not read by renormalised softmax, whose
// gradient d_logits[t, idx_j] += g_j (d_j - sum_j' g_j' d_j' / scaling) needs the gates alone; may
// then be empty). opt.selection_bias is not read.
Status topk_route_backward(Context& ctx, const RouteOptions& opt, const TensorView& logits,
                           const TensorView& d_gate, const TensorView& gate, const TensorView& idx,
                           const TensorView& d_logits);
// topk_route and its backward with the default RouteOptions (softmax, renormalised, unscaled, no
// bias): gate[t, :] = softmax over the K largest logits.
Status topk_softmax(Context& ctx, const TensorView& logits, const TensorView& idx,
                    const TensorView& gate, const TensorView& probs, const TensorView& lse);
Status topk_softmax_backward(Context& ctx, const TensorView& d_gate, const TensorView& gate,
                             const TensorView& idx, const TensorView& d_logits);

// Per-sequence routing counts for DeepSeek-V3's sequence-wise balance loss: rows are
// sequence-major (row b S + s), so sequence b holds rows [b S, (b + 1) S) with S = T / B.
// counts[b, e] = #{(t, j): t in sequence b, idx[t, j] = e} (indices outside [0, E) are not
// counted). idx [T, K] i32; counts [B, E] i64, overwritten; B must divide T.
Status sequence_counts(Context& ctx, const TensorView& idx, const TensorView& counts);

// --- SparseMixer top-1 (spec/sparsemixer-acmoe.md A.3-A.5) -----------------------------------
struct SparseMixerRouteArgs {
  SparseMixerParams params;
  bool training = true;      // false: D = argmax, c = 1
  CounterRng rng;            // Gumbel sample and midpoint coin (a device step shifts tokens)
  int64_t token_offset = 0;  // global id of token 0 (keys the draws, independent of layout)
};
// What sparsemixer_route writes (each described below).
struct SparseMixerRouteOut {
  TensorView idx, gate, probs, lse, mask, scale, is_argmax;
};
// idx [T, 1] = sampled (training) or argmax expert; gate [T, 1] = c * pi_D; probs [T, E] = the
// masked softmax pi; lse [T] = logsumexp over all E of the unmasked logits (z-loss);
// mask [T, E] u8 = Delta; scale [T] = c (1 or 1/2); is_argmax [T] u8 = delta_D. Overwrites all.
Status sparsemixer_route(Context& ctx, const SparseMixerRouteArgs& args, const TensorView& logits,
                         const SparseMixerRouteOut& out);
// d_gate [T, 1] is s = dL/d(c pi_D). The gate-gradient rule turns it into dL/dpi_D (2 s, or
// (1 + c) s), then through the masked softmax: d_logits[t, j] += dpi * pi_D (1[j = D] - pi_j)
// Delta_j. Accumulates into d_logits.
Status sparsemixer_backward(Context& ctx, SparseMixerGateGrad rule, const TensorView& d_gate,
                            const TensorView& idx, const TensorView& probs, const TensorView& mask,
                            const TensorView& scale, const TensorView& d_logits);

// --- Auxiliary losses --------------------------------------------------------------------------
// The sums the auxiliary losses are made of, packed for one all-reduce over the ranks that share
// the losses (f64 [3E + 3], overwritten):
//   [0, E): load[e] (assignments before capacity), [E, 2E): sum_t probs[t, e],
//   [2E]: tokens (a host constant), [2E + 1]: sum_t lse[t]^2,
//   [2E + 2, 3E + 2): q_e = sum over sequences b of n_be P_be / S^2 (n = seq_counts, P_be =
//   sum_{t in b} probs[t, e], S tokens per sequence), [3E + 2]: sequences B.
// probs [T, E] F; lse [T] F; load [E] i64; seq_counts [B, E] i64 (sequence_counts), or empty:
// the sequence slots are zero.
inline int64_t aux_packed_size(int64_t experts) { return 3 * experts + 3; }
Status aux_sums(Context& ctx, const TensorView& probs, const TensorView& lse,
                const TensorView& load, const TensorView& seq_counts, int64_t tokens,
                const TensorView& packed);
// The weights of aux_losses and aux_losses_backward: the router's top-k, each loss's weight in the
// total, and how the probabilities came from the logits (the backward's Jacobian).
struct AuxLossWeights {
  int64_t top_k = 1;
  double balance = 0, z = 0;
  double seq = 0;
  ScoreFunction score = ScoreFunction::kSoftmax;
};
// From packed sums: losses f64 [4] (overwritten) = (balance, z, weighted, seq), with the Switch
// balance loss E * sum_e f_e P_e (f_e = load_e / (T K), no gradient; P_e = prob_sum_e / T), the
// z-loss lse_sq_sum / T, DeepSeek-V3's sequence-wise balance loss (its Eq. 17-20), the mean over
// the B sequences of sum_e f_be P_be with f_be = E n_be / (K S), P_be = (1/S) sum_{t in b} p_te,
// that is (E / K) sum_e q_e / B, and weighted = w.balance * balance + w.z * z + w.seq * seq.
// T = packed tokens (0 gives zero balance and z), B = packed sequences (0: zero seq).
inline constexpr int64_t kAuxLossesSize = 4;
Status aux_losses(Context& ctx, const TensorView& packed, const AuxLossWeights& w,
                  const TensorView& losses);
// Gradient of the losses above w.r.t. this rank's logits, with T, B and the loads from `packed`:
// d_logits += w.balance * dBalance/dlogits + w.seq * dSeq/dlogits (both through `probs`, the
// full or masked softmax or the normalised sigmoid scores of the logits, as w.score says; the
// counts are constants) + w.z * dZ/dlogits (through softmax(logits) = exp(logits - lse)).
// seq_counts [B_local, E] i64 as given to aux_sums (empty: no sequence loss gradient).
Status aux_losses_backward(Context& ctx, const TensorView& logits, const TensorView& probs,
                           const TensorView& packed, const TensorView& lse,
                           const TensorView& seq_counts, const AuxLossWeights& w,
                           const TensorView& d_logits);

// --- Adaptive Clustering metric (spec/sparsemixer-acmoe.md B.3, B.7, B.9) --------------------
// Pass 1: per-cluster sums of x and counts, clusters given by labels [T] i32 in [0, E).
//   x [T, D] act; sums [E, D] f64 and counts [E] i64 are overwritten.
Status ac_cluster_sums(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& sums, const TensorView& counts);
// Pass 2: per-cluster sums of |x - mean_k| where mean_k = sums_k / counts_k. abs_dev [E, D] f64,
// overwritten. (Between the passes, sums and counts may be all-reduced for global statistics.)
Status ac_cluster_abs_dev(Context& ctx, const TensorView& x, const TensorView& labels,
                          const TensorView& sums, const TensorView& counts,
                          const TensorView& abs_dev);
// The metric M [E, D] F: mad = abs_dev / count; W = 1 / (mad + eps); clusters with
// count < min_cluster_size get W = 1 and are left out of the normalisation; then the paper or
// reference-code normalisation. Overwrites metric and summary f64 [5] =
//   (tiny clusters, clipped fraction (reference-code clip), min, max, mean of M).
inline constexpr int64_t kAcSummarySize = 5;
Status ac_metric(Context& ctx, const AcRouterParams& params, const TensorView& abs_dev,
                 const TensorView& counts, const TensorView& metric, const TensorView& summary);
// out[t, :] = x[t, :] * metric[labels[t], :] (the router input). x act; out F. Overwrites out.
// Every label must lie in [0, E) (the CUDA kernels read metric[labels[t]] unchecked).
Status ac_apply_metric(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& metric, const TensorView& out);
// dx[t, :] += d_out[t, :] * metric[labels[t], :] (no gradient reaches the metric). d_out F; dx act.
Status ac_apply_metric_backward(Context& ctx, const TensorView& d_out, const TensorView& labels,
                                const TensorView& metric, const TensorView& dx);

// --- Unit-norm expert embeddings (the reference code's AC gate, spec B.7) ---------------------
// The router weight's columns are the experts' embeddings: out[:, e] = w[:, e] / ||w[:, e]||_2,
// inv_norm[e] = 1 / ||w[:, e]||_2 (a zero column gives zeros and inv_norm 0). Norms in double.
//   w, out [D, E] F; inv_norm [E] F. Overwrites out and inv_norm.
Status normalize_columns(Context& ctx, const TensorView& w, const TensorView& out,
                         const TensorView& inv_norm);
// Its gradient: dw[:, e] += inv_norm[e] (d_out[:, e] - out[:, e] <out[:, e], d_out[:, e]>).
// d_out, out, dw [D, E] F; inv_norm [E] F. Accumulates into dw.
Status normalize_columns_backward(Context& ctx, const TensorView& d_out, const TensorView& out,
                                  const TensorView& inv_norm, const TensorView& dw);

// top1[t] = argmax_e logits[t, e], lowest index on ties. logits [T, E] F; top1 [T] i32.
Status argmax_rows(Context& ctx, const TensorView& logits, const TensorView& top1);

}  // namespace moe::kernels
