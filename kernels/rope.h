// Rotary position embeddings (RoPE) on the attention's packed projections, in the convention of
// transformers' Llama/Mixtral/Qwen2 `rotate_half`: each head's width Dh is split in halves, and
// pair (i, i + Dh/2), i in [0, Dh/2), turns by the angle s * base^(-2i/Dh) at position s:
//   x'_i        = x_i        cos - x_{i+Dh/2} sin
//   x'_{i+Dh/2} = x_{i+Dh/2} cos + x_i        sin
// The dot product of a rotated q at position s and a rotated k at position s' then depends on
// s - s' only, and position 0 is the identity.
//
// qkv [B*S, 3D] has the layout of kernels/attention.h: rows sequence-major (row b*S + s is
// position s of sequence b; positions restart at 0 in every sequence), columns [q | k | v], head h
// owning columns h*Dh .. (h+1)*Dh - 1 of each block. q and k rotate; v passes through.
//
// Numerics: the angle, cos and sin are computed in double (kernels/cpu/rope_math.h, shared by the
// CPU and CUDA backends) and rounded once to F = compute_dtype(act), the table a real model keeps;
// each rotated element is then formed in double from those F values and rounded once to act. The
// backends agree to that rounding (cos and sin come from different libms).
#pragma once

#include "base/context.h"
#include "base/tensor.h"

namespace moe::kernels {

struct RopeArgs {
  int64_t batch = 0;      // B sequences
  int64_t seq_len = 0;    // S positions per sequence
  int64_t heads = 0;      // H: D = 3D/3 must be divisible by H, and Dh = D / H even
  double base = 10000.0;  // theta > 0
};

// [in] qkv [B*S, 3D] act. [out] out [B*S, 3D] act, overwritten: q and k rotated, v copied. out may
// be qkv itself (in place); it must not overlap qkv otherwise.
Status rope_forward(Context& ctx, const RopeArgs& args, const TensorView& qkv,
                    const TensorView& out);
// The transpose of rope_forward (every pair turned by -angle): the gradient of its input.
// [in] d_out [B*S, 3D] act = dL/d(rotated qkv). [out] d_qkv [B*S, 3D] act, overwritten: dq and dk
// rotated back, dv copied. d_qkv may be d_out itself (in place); it must not overlap otherwise.
Status rope_backward(Context& ctx, const RopeArgs& args, const TensorView& d_out,
                     const TensorView& d_qkv);

}  // namespace moe::kernels
