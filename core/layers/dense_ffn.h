// Dense feed-forward sublayer (x @ W convention, row-major):
//   h = dropout(act(x W1 + b1)) [N, F];  y = h W2 + b2 [N, D].
// With a gated activation (SwiGLU) W1 = [W_gate | W_up] is [D, 2F] and act(z) = silu(z_gate) *
// z_up, so the pre-activation is [N, 2F]. Parameters: <prefix>.w1 [D, F] (gated: [D, 2F]),
// <prefix>.w2 [F, D]; with biases (the model's linear_bias) also <prefix>.b1 [F] ([2F]) and
// <prefix>.b2 [D] (without, none is registered or added). Biases are not weight-decayed; the
// matrices are GEMM operands, bf16 under BF16. The hidden dropout keys row t by the global token
// id token_offset + t (kernels/activation.h), so masks do not depend on how batches are split
// across ranks. Forward and backward return new tensors; backward accumulates (+=) parameter
// gradients. Errors name the layer's prefix. Selective recomputation (train.recompute SELECTIVE):
// forward keeps x but not h_pre and h, which backward recomputes from x with the same kernels,
// weights and dropout keys (the same bits).
#pragma once

#include <string>

#include "base/rng.h"
#include "core/layers/parameters.h"
#include "kernels/activation.h"
#include "types/moe_config.h"

namespace moe {

class DenseFfn {
 public:
  // Everything backward needs, filled by forward.
  struct Saved {
    Tensor x;                  // [N, D] the input
    Tensor h_pre;              // [N, F] x W1 + b1 ([N, 2F] when gated); empty: recomputed
    Tensor h;                  // [N, F] after the activation and dropout; empty: recomputed
    int64_t token_offset = 0;  // dropout key of row 0
    float dropout = 0.f;       // 0 when not training
    CounterRng rng;
    bool recompute_hidden = false;  // h_pre and h not kept: backward recomputes them from x
  };
  // bias: register and add b1 and b2 (ModelConfig::linear_bias).
  DenseFfn(const std::string& prefix, int64_t d_model, int64_t d_ff, ExpertActivation activation,
           bool bias, double dropout, ParameterSet* params);
  // [in] x [N, D]; token_offset: the global id of row 0; training enables dropout, drawn from rng.
  // recompute_hidden: keep x but not h_pre and h (SELECTIVE). Returns y [N, D].
  StatusOr<Tensor> forward(const Tensor& x, int64_t token_offset, bool training, CounterRng rng,
                           Saved* saved, bool recompute_hidden = false) const;
  // [in] dy [N, D]; returns dx [N, D].
  StatusOr<Tensor> backward(const Tensor& dy, const Saved& saved) const;

 private:
  Status check(const char* name, const TensorView& t, int64_t rows) const;
  // The hidden rows of saved.x (forward, and backward's recomputation): h_pre = x W1 + b1 and
  // h = dropout(act(h_pre)) under saved's keys, rng and dropout; new tensors.
  Status hidden(const Saved& saved, Tensor* h_pre, Tensor* h) const;

  std::string prefix_;
  Context& ctx_;
  DType act_;
  ExpertActivation activation_;
  double dropout_;
  int64_t d_model_, d_ff_;
  Parameter* w1_;
  Parameter* b1_ = nullptr;  // null without biases
  Parameter* w2_;
  Parameter* b2_ = nullptr;
};

}  // namespace moe
