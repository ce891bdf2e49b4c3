// Plain C++ routing loops (the CPU backend and the oracle for the CUDA router kernels). Pointers
// are row-major; see kernels/router.h for the contracts. T = F = float or double (router);
// A = float, double or bf16 (activations read by the AC statistics).
#pragma once

#include <cstdint>

#include "base/rng.h"
#include "types/moe_config.h"

namespace moe::kernels::ref {

template <typename T>
void topk_softmax(const T* logits, int64_t tokens, int64_t experts, int64_t k, int32_t* idx,
                  T* gate, T* probs, T* lse);
template <typename T>
void topk_softmax_backward(const T* d_gate, const T* gate, const int32_t* idx, int64_t tokens,
                           int64_t experts, int64_t k, T* d_logits);

template <typename T>
void sparsemixer_route(const SparseMixerParams& params, bool training, const CounterRng& rng,
                       int64_t token_offset, const T* logits, int64_t tokens, int64_t experts,
                       int32_t* idx, T* gate, T* probs, T* lse, uint8_t* mask, T* scale,
                       uint8_t* is_argmax);
template <typename T>
void sparsemixer_backward(SparseMixerGateGrad rule, const T* d_gate, const int32_t* idx,
                          const T* probs, const uint8_t* mask, const T* scale, int64_t tokens,
                          int64_t experts, T* d_logits);

// `local` rows of logits; `tokens` is the T the losses are normalised by (local or global);
// load [E] as doubles (the packed, possibly all-reduced sums).
template <typename T>
void aux_losses_backward(const T* logits, const T* probs, const double* load, const T* lse,
                         int64_t local, double tokens, int64_t experts, int64_t k,
                         double balance_weight, double z_weight, T* d_logits);

// AC statistics over x of type A (float, double or bf16); the metric and router input are F.
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
// The AC metric itself is ref::ac_metric in router_math.h (shared with the CUDA kernel).

}  // namespace moe::kernels::ref
