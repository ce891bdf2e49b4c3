// Fused (flash-style) causal attention for bf16 activations on tensor cores: the scores, the
// probabilities and their gradients live in registers, a warp's 16 x 64 block at a time, and
// never in global memory (the GEMM path of attention.cu materialises B x H x S x S floats twice
// per step). The kernels are in flash_attention_kernels.cuh (their CPU test runs them through
// tests/testing/warp_emulator.h).
// Host-only declarations (no CUDA types), so the CPU build includes this file too.
//
// The contract is kernels/attention.h's: the same inputs, outputs, saved logsumexp, dropout
// mask keys and causal rule. The arithmetic differs from the CPU reference in the places listed
// in flash_attention_kernels.cuh (products on bf16 tensor cores with f32 accumulation, the
// probabilities and the score gradients rounded to bf16 before their products), so it is compared
// with an exact (f64) computation under an error bound derived from those roundings
// (tests/testing/attention_bound.h), not with the reference's tolerance. Deterministic: every
// output element is summed by one warp in a fixed order, no atomics.
#pragma once

#include <cstdint>

#include "base/context.h"
#include "kernels/attention.h"

namespace moe::kernels::cuda {

// The largest head dimension the fused kernels take (heads are padded to 32, 64 or 128);
// kernels/attention.h's cuda_attention sends wider heads to a GEMM path.
inline constexpr int64_t kFusedAttentionMaxHeadDim = 128;

// bf16 qkv [B*S, 3D] -> out [B*S, D] (bf16), lse [B, H, S] (f32). Views validated by the caller.
Status fused_attention_forward(Context& ctx, const AttentionArgs& args, const TensorView& qkv,
                               const TensorView& out, const TensorView& lse);
// bf16 d_out [B*S, D], qkv [B*S, 3D], out [B*S, D] (the forward's), f32 lse [B, H, S] ->
// d_qkv [B*S, 3D] (bf16).
Status fused_attention_backward(Context& ctx, const AttentionArgs& args, const TensorView& d_out,
                                const TensorView& qkv, const TensorView& out, const TensorView& lse,
                                const TensorView& d_qkv);

}  // namespace moe::kernels::cuda
