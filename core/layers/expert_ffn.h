// The local experts of one MoE layer as two-layer FFNs over the expert blocks of the receive
// buffer (kernels/expert_blocks.h: block b = r * E_l + l holds the rows EP rank r sent to local
// expert l):
//   y = dropout(act(x W1_e + b1_e)) W2_e + b2_e     for the rows of expert e,
// one expert GEMM per weight over all blocks (BLAS on the CPU, cuBLAS on the GPU). With a gated
// activation (SwiGLU) W1_e = [W_gate | W_up] is [D, 2F] and act(z) = silu(z_gate) * z_up, so the
// pre-activation is [M, 2F] and the hidden rows [M, F]. Dropout masks are keyed by each row's
// (global token, choice) key, so they do not depend on where a row sits in a buffer (the same
// masks for every EP layout); rows whose key is negative are empty slots.
// Selective recomputation (train.recompute SELECTIVE): forward keeps the input rows but not the
// hidden rows h_pre and h ([M, F] or [M, 2F]); backward recomputes them from the kept rows with
// the same kernels, weights and dropout keys, so they are the same bits (the exchange that
// brought the rows is not repeated).
//
// Parameters (expert shards, [E_local, ...]): <prefix>.w1 [E_l, D, F] (gated: [E_l, D, 2F]),
// <prefix>.w2 [E_l, F, D]; with cfg.linear_bias also <prefix>.b1 [E_l, F] ([E_l, 2F]) and
// <prefix>.b2 [E_l, D] (without, none is registered or added). The matrices are GEMM operands
// (bf16 under BF16).
#pragma once

#include <string>

#include "base/rng.h"
#include "core/layers/parameters.h"
#include "kernels/activation.h"
#include "kernels/expert_blocks.h"
#include "types/moe_config.h"

namespace moe {

struct ExpertSaved {
  Tensor x;         // [M, D] rows, in blocks
  Tensor h_pre;     // [M, F] pre-activation ([M, 2F] when gated); empty when recomputed
  Tensor h;         // [M, F] after activation and dropout; empty when recomputed
  Tensor row_keys;  // [M] i64 dropout keys
  kernels::ExpertBlocks blocks;
  float dropout = 0.f;
  CounterRng rng;
  bool recompute_hidden = false;  // h_pre and h not kept: backward recomputes them from x
};

class ExpertFfn {
 public:
  // Registers the shards of experts [first_expert, first_expert + local_experts).
  ExpertFfn(const std::string& prefix, const MoeLayerConfig& cfg, int64_t local_experts,
            int64_t first_expert, ParameterSet* params);

  // x [M, D] in `blocks`; row_keys [M] i64. dropout_p > 0 only in training. Returns y [M, D].
  // recompute_hidden: keep only x (and the keys) in `saved`, not h_pre and h (SELECTIVE).
  StatusOr<Tensor> forward(const Tensor& x, const kernels::ExpertBlocks& blocks,
                           const Tensor& row_keys, CounterRng rng, float dropout_p,
                           ExpertSaved* saved, bool recompute_hidden = false);
  // dy [M, D]; returns dx [M, D]; parameter gradients accumulate.
  StatusOr<Tensor> backward(const Tensor& dy, const ExpertSaved& saved);

  int64_t local_experts() const { return local_experts_; }

 private:
  // The hidden rows of saved.x (forward, and backward's recomputation): h_pre = x W1 + b1 and
  // h = dropout(act(h_pre)) under saved's blocks, keys, rng and dropout; new tensors.
  Status hidden(const ExpertSaved& saved, Tensor* h_pre, Tensor* h) const;

  Context& ctx_;
  DType act_;
  ExpertActivation activation_;
  int64_t local_experts_;
  int64_t d_model_, d_ff_;
  Parameter* w1_;
  Parameter* b1_ = nullptr;  // null without biases
  Parameter* w2_;
  Parameter* b2_ = nullptr;
};

// The elementwise kernel activation of `act`; for a gated one, that of its gate (SwiGLU: SiLU).
kernels::Activation to_kernel_activation(ExpertActivation act);

// The FFN activation shared by the dense FFN and the experts: h [N, F] = act(h_pre), h_pre
// [N, F], or [N, 2F] when gated (kernels::swiglu_forward).
Status ffn_activation_forward(Context& ctx, ExpertActivation act, const TensorView& h_pre,
                              const TensorView& h);
// The gradient at h_pre from dh [N, F]: in place in dh when elementwise (returns dh), a new
// [N, 2F] tensor when gated.
StatusOr<Tensor> ffn_activation_backward(Context& ctx, ExpertActivation act, const Tensor& h_pre,
                                         const Tensor& dh);

}  // namespace moe
