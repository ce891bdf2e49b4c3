// Elementwise activations, the gated SwiGLU, the sigmoid row gate, bias addition and its gradient
// (dense rows, or one bias per local expert over ExpertBlocks), and counter-based dropout.
// Activations are "act" (f32, f64, bf16); biases and bias gradients are full precision (F =
// compute_dtype(act)).
#pragma once

#include "base/context.h"
#include "base/rng.h"
#include "base/tensor.h"
#include "kernels/expert_blocks.h"

namespace moe::kernels {

enum class Activation {
  kRelu,      // max(x, 0); derivative 0 at x = 0
  kGelu,      // x * Phi(x), the exact (erf) form
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's approximation
  kSilu,      // x sigmoid(x) (SwiGLU's gate activation); the sigmoid never overflows
};
const char* activation_name(Activation act);

// y = act(x). x, y: one act dtype and shape; y may alias x.
Status activation_forward(Context& ctx, Activation act, const TensorView& x, const TensorView& y);
// dx = act'(x) * dy, x the pre-activation input. One act dtype and shape; dx may alias dy.
Status activation_backward(Context& ctx, Activation act, const TensorView& x, const TensorView& dy,
                           const TensorView& dx);

// SwiGLU (Llama, Mixtral, Qwen-MoE: act_fn(x W_gate) * (x W_up)): x [M, 2F] act holds each row's
// [gate | up] halves; y [M, F] (x's dtype) = silu(gate) * up, computed in double and rounded
// to x's dtype (through f32 for bf16). y must not overlap x (a call with y at x's address is
// refused).
Status swiglu_forward(Context& ctx, const TensorView& x, const TensorView& y);
// dx [M, 2F] (overwritten) = [dy * up * silu'(gate) | dy * silu(gate)]; x [M, 2F] the forward's
// input, dy [M, F]; one act dtype. dx must not overlap x or dy (dx at either's address is
// refused).
Status swiglu_backward(Context& ctx, const TensorView& x, const TensorView& dy,
                       const TensorView& dx);

// Qwen2-MoE's gated shared expert, one gate per row: y[r, :] = sigmoid(logit[r]) * x[r, :],
// computed in double and rounded to x's dtype (through f32 for bf16). x, y [M, N] one act dtype
// (y may alias x); logit [M, 1] F.
Status sigmoid_gate_forward(Context& ctx, const TensorView& x, const TensorView& logit,
                            const TensorView& y);
// Its gradients, s = sigmoid(logit[r]): dx[r, :] = s * dy[r, :] (dx may alias dy) and
// dlogit[r] = s (1 - s) sum_j dy[r, j] x[r, j] (act [M, 1], overwritten), the sum in double (the
// host in column order, the GPU by a fixed tree: each the same bits on every run).
Status sigmoid_gate_backward(Context& ctx, const TensorView& x, const TensorView& logit,
                             const TensorView& dy, const TensorView& dx, const TensorView& dlogit);

// x[r, :] += bias[:] for every row. x [M, N] act; bias [N] F. In place.
Status add_bias(Context& ctx, const TensorView& x, const TensorView& bias);
// dbias[:] += sum over rows of dy[r, :]. dy [M, N] act; dbias [N] F. Accumulates (in double,
// row order).
Status bias_grad(Context& ctx, const TensorView& dy, const TensorView& dbias);
// Per local expert: x[rows of block b, :] += bias[expert_of(b), :]. x [M, N] act; bias [E_l, N] F.
// Padding rows (capacity mode with `filled`) are set to zero on the host backend.
Status add_bias_blocks(Context& ctx, const TensorView& x, const TensorView& bias,
                       const ExpertBlocks& blocks);
// dbias[l, :] += sum over the filled rows of l's blocks (rank order, then row order) of dy.
Status bias_grad_blocks(Context& ctx, const TensorView& dy, const TensorView& dbias,
                        const ExpertBlocks& blocks);

// Inverted dropout with a counter-based mask. Row r's key is row_keys[r] (i64 [M] on the device)
// when given, else key_base + r. Element (r, j) is kept when u >= p, u the 24-bit uniform from
// lane j % 4 of rng.block(key * ceil(N / 4) + j / 4) (four elements per Philox draw); kept
// elements are scaled by 1 / (1 - p). A row whose key is negative (an empty capacity slot) is
// zeroed. Keying rows by a global token id makes the mask independent of where the row sits in a
// buffer (EP layout). x, y [M, N] one act dtype (y may alias x). p in [0, 1); p = 0 copies.
Status dropout_forward(Context& ctx, const TensorView& x, const TensorView& row_keys,
                       int64_t key_base, CounterRng rng, float p, const TensorView& y);
// dx = keep ? dy / (1 - p) : 0, redrawing the same mask. dx may alias dy.
Status dropout_backward(Context& ctx, const TensorView& dy, const TensorView& row_keys,
                        int64_t key_base, CounterRng rng, float p, const TensorView& dx);

}  // namespace moe::kernels
