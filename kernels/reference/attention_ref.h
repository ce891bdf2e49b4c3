// Plain C++ causal attention core (the CPU backend): softmax and its backward in loops, the two
// products per (sequence, head) through CBLAS. See kernels/attention.h for layouts, the mask key
// and the contracts. T = float or double.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace moe::kernels::ref {

// Whether dropout keeps probability (b, h, i, j); always true when args.dropout == 0.
bool attention_keep(const AttentionArgs& args, int64_t b, int64_t h, int64_t i, int64_t j);

// qkv [B*S, 3D]; out [B*S, D]; probs [B, H, S, S]. D = H * head_dim.
template <typename T>
void attention_forward(const AttentionArgs& args, int64_t head_dim, const T* qkv, T* out, T* probs);
// d_out [B*S, D]; d_qkv [B*S, 3D] overwritten.
template <typename T>
void attention_backward(const AttentionArgs& args, int64_t head_dim, const T* d_out, const T* qkv,
                        const T* probs, T* d_qkv);

}  // namespace moe::kernels::ref
