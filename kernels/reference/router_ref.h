// Plain C++ routing loops (the CPU backend and the oracle for the CUDA router kernels). Pointers
// are row-major; see kernels/router.h for the contracts. T = float or double.
#pragma once

#include <cstdint>

#include "core/base/moe_config.h"
#include "core/base/rng.h"

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

void assign_capacity(const int32_t* idx, int64_t tokens, int64_t k, int64_t experts,
                     int64_t capacity, int32_t* slot, int64_t* load, int64_t* kept);

// `local` rows of logits; `tokens` is the T the losses are normalised by (local or global).
template <typename T>
void aux_losses_backward(const T* logits, const T* probs, const int64_t* load, const T* lse,
                         int64_t local, int64_t tokens, int64_t experts, int64_t k,
                         double balance_weight, double z_weight, T* d_logits);

template <typename T>
void ac_cluster_sums(const T* x, const int32_t* labels, int64_t tokens, int64_t d,
                     int64_t experts, double* sums, int64_t* counts);
template <typename T>
void ac_cluster_abs_dev(const T* x, const int32_t* labels, int64_t tokens, int64_t d,
                        int64_t experts, const double* sums, const int64_t* counts,
                        double* abs_dev);
template <typename T>
void ac_apply_metric(const T* x, const int32_t* labels, const T* metric, int64_t tokens,
                     int64_t d, T* out, bool accumulate);

}  // namespace moe::kernels::ref
