// Attention's GEMM path on bf16 operands (attention_bf16.cu; MOMOE_ATTENTION=gemm-bf16, see
// kernels/attention.h's cuda_attention): the products of attention.cu's path, per sequence and
// strided over the heads, with bf16 operands on the tensor cores and f32 accumulation instead of
// widened f32 operands. The scores stay f32 (B x H x S x S, as on the f32 path); the
// probabilities P and the score gradients dS are rounded to bf16 (B x H x S x S each) before
// their products, the roundings of the fused kernels (flash_attention.h), so the same derived
// bound (tests/testing/attention_bound.h) checks both. Host-only declarations (no CUDA types).
#pragma once

#include "base/context.h"
#include "kernels/attention.h"

namespace moe::kernels::cuda {

// bf16 qkv [B*S, 3D] -> out [B*S, D] (bf16), lse [B, H, S] (f32). Views validated by the caller.
Status bf16_attention_forward(Context& ctx, const AttentionArgs& args, const TensorView& qkv,
                              const TensorView& out, const TensorView& lse);
// bf16 d_out [B*S, D], qkv [B*S, 3D], f32 lse [B, H, S] -> d_qkv [B*S, 3D] (bf16).
Status bf16_attention_backward(Context& ctx, const AttentionArgs& args, const TensorView& d_out,
                               const TensorView& qkv, const TensorView& lse,
                               const TensorView& d_qkv);

}  // namespace moe::kernels::cuda
