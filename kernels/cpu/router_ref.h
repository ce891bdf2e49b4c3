// Plain C++ routing loops (the CPU backend and the oracle for the CUDA router kernels). Pointers
// are row-major; see kernels/router.h for the contracts. T = F = float or double (router);
// A = float, double or bf16 (activations read by the AC statistics).
#pragma once

#include <cstdint>

#include "base/rng.h"
#include "kernels/cpu/router_math.h"  // AuxGradArgs, RouteParams
#include "types/moe_config.h"

namespace moe::kernels::ref {

// topk_route_token (router_math.h) for each of `tokens` rows: logits, probs [T, E]; idx, gate
// [T, K]; lse [T]; bias [E] or null.
template <typename T>
void topk_route(const RouteParams& p, const T* logits, const T* bias, int64_t tokens, int32_t* idx,
                T* gate, T* probs, T* lse);
// topk_route_backward_token for each row (logits may be null for renormalised softmax).
template <typename T>
void topk_route_backward(const RouteParams& p, const T* logits, const T* d_gate, const T* gate,
                         const int32_t* idx, int64_t tokens, T* d_logits);

// counts [sequences, E] of idx [tokens, K] (kernels/router.h sequence_counts).
void sequence_counts(const int32_t* idx, int64_t tokens, int64_t k, int64_t sequences,
                     int64_t experts, int64_t* counts);

// What sparsemixer_route writes, row-major over `tokens` rows (kernels/router.h
// SparseMixerRouteOut): idx [T] the chosen expert, gate [T] = c * pi_D, probs [T, E] the masked
// softmax, lse [T] the unmasked logsumexp, mask [T, E] (u8), scale [T] = c, is_argmax [T] (u8).
template <typename T>
struct SparseMixerOutputs {
  int32_t* idx;
  T* gate;
  T* probs;
  T* lse;
  uint8_t* mask;
  T* scale;
  uint8_t* is_argmax;
};
template <typename T>
void sparsemixer_route(const SparseMixerParams& params, bool training, const CounterRng& rng,
                       int64_t token_offset, const T* logits, int64_t tokens, int64_t experts,
                       const SparseMixerOutputs<T>& out);

// What sparsemixer_backward reads from the forward pass (sparsemixer_route's outputs): idx [T],
// probs [T, E], mask [T, E] (u8) and scale [T].
template <typename T>
struct SparseMixerSaved {
  const int32_t* idx;
  const T* probs;
  const uint8_t* mask;
  const T* scale;
};
template <typename T>
void sparsemixer_backward(SparseMixerGateGrad rule, const T* d_gate,
                          const SparseMixerSaved<T>& saved, int64_t tokens, int64_t experts,
                          T* d_logits);

// aux_sums: packed [2E + 2] (kernels/router.h) from probs [rows, E], lse [rows] and the
// loads [E]; `tokens` is the token count stored in the pack.
// (The sequence slots are zeroed; aux_sequence_sums fills them.)
template <typename T>
void aux_sums(const T* probs, const T* lse, const int64_t* load, int64_t rows, int64_t experts,
              int64_t tokens, double* packed);
// The sequence slots of the pack: q_e for e < E and the sequence count, from probs [rows, E] and
// seq_counts [sequences, E] (rows / sequences tokens each).
template <typename T>
void aux_sequence_sums(const T* probs, const int64_t* seq_counts, int64_t rows, int64_t experts,
                       int64_t sequences, double* packed);

// `local` rows of logits; a.tokens is the T the losses are normalised by (local or global);
// load [E] as doubles (the packed, possibly all-reduced sums); seq_counts [local / a.seq_len, E],
// read only when a.seq_len > 0. Nothing when a.tokens is not > 0.
template <typename T>
void aux_losses_backward(const T* logits, const T* probs, const double* load, const T* lse,
                         const int64_t* seq_counts, int64_t local, const AuxGradArgs& a,
                         T* d_logits);

// Column-wise unit normalisation of w [d, E] (normalize_column for every e), and its backward.
template <typename T>
void normalize_columns(const T* w, int64_t d, int64_t experts, T* out, T* inv_norm);
template <typename T>
void normalize_columns_backward(const T* d_out, const T* out, const T* inv_norm, int64_t d,
                                int64_t experts, T* dw);

// top1[t] = the first index of row t's largest logit (logits [tokens, E]).
template <typename T>
void argmax_rows(const T* logits, int64_t tokens, int64_t experts, int32_t* top1);

// The first t with labels[t] outside [0, experts), or -1 when every label is inside.
int64_t first_label_outside(const int32_t* labels, int64_t n, int64_t experts);

// AC statistics over x of type A (float, double or bf16); the metric and router input are F.
// Each cluster's sums (and absolute deviations) run over its tokens in token order in chunks of
// kAcSumChunk, each chunk summed from zero in double and added to the total in chunk order: the
// CUDA kernels sum each (chunk, feature) on a thread of its own and then the chunks in order, so
// both give the same bits.
inline constexpr int64_t kAcSumChunk = 64;
template <typename A>
void ac_cluster_sums(const A* x, const int32_t* labels, int64_t tokens, int64_t d, int64_t experts,
                     double* sums, int64_t* counts);
template <typename A>
void ac_cluster_abs_dev(const A* x, const int32_t* labels, int64_t tokens, int64_t d,
                        int64_t experts, const double* sums, const int64_t* counts,
                        double* abs_dev);
template <typename A, typename F>
void ac_apply_metric(const A* x, const int32_t* labels, const F* metric, int64_t tokens, int64_t d,
                     F* out);
template <typename A, typename F>
void ac_apply_metric_backward(const F* d_out, const int32_t* labels, const F* metric,
                              int64_t tokens, int64_t d, A* dx);
// The AC metric [E, D] as F (kernels/router.h ac_metric), computed in f64 from the per-element
// steps of router_math.h with chunked_sum.h's order for its long sums (the CUDA kernels' order).
template <typename F>
void ac_metric_typed(const AcRouterParams& params, const double* abs_dev, const int64_t* counts,
                     int64_t experts, int64_t d, F* metric, double* summary);

}  // namespace moe::kernels::ref
