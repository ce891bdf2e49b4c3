// Plain C++ causal attention core (the CPU backend): softmax and its backward in loops, the two
// products per (sequence, head) through CBLAS. See kernels/attention.h for layouts, the mask key
// and the contracts. A = float, double or bf16 (activations); F = float or double (lse).
#pragma once

#include <cstdint>

#include "base/dtype.h"  // MOE_HOST_DEVICE
#include "kernels/attention.h"

namespace moe::kernels::ref {

// Whether dropout keeps probability (b, h, i, j); always true when args.dropout == 0. Keyed by
// the global (sequence, head, row, column), so the CPU and the CUDA kernel draw the same mask. A
// step in device memory (a.rng.device_step: its key shift counts sequences) is read here.
MOE_HOST_DEVICE inline bool attention_keep(const AttentionArgs& a, int64_t b, int64_t h, int64_t i,
                                           int64_t j) {
  if (a.dropout == 0.f) return true;
  const int64_t sequence = a.sequence_offset + a.rng.key_shift() + b;
  const uint64_t row = static_cast<uint64_t>((sequence * a.heads + h) * a.seq_len + i);
  const uint64_t key = row * static_cast<uint64_t>(a.seq_len) + static_cast<uint64_t>(j);
  return a.rng.at_step().uniform(key) >= a.dropout;
}

// qkv [B*S, 3D]; out [B*S, D]; lse [B, H, S]. D = H * head_dim.
template <typename A, typename F>
void attention_forward(const AttentionArgs& args, int64_t head_dim, const A* qkv, A* out, F* lse);
// d_out [B*S, D]; lse [B, H, S]; d_qkv [B*S, 3D] overwritten.
template <typename A, typename F>
void attention_backward(const AttentionArgs& args, int64_t head_dim, const A* d_out, const A* qkv,
                        const F* lse, A* d_qkv);

}  // namespace moe::kernels::ref
