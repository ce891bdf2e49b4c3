// The shared experts of an MoE layer (DeepSeek-MoE, Qwen2-MoE): always-active experts computed
// where the token is (no exchange), as one dense FFN of their summed width
// (MoeLayerConfig::shared_width(), parameters <prefix>.w1, .w2 and with biases .b1, .b2; see
// DenseFfn). Their output joins the routed experts' in the layer's output u.
//
// With shared_expert_gate (Qwen2-MoE's `shared_expert_gate`) each token's output is scaled by
// sigmoid(y . w): s(y) = sigmoid(y w) * FFN(y), w = <prefix>.w_gate [D, 1], a GEMM operand (bf16
// under BF16, the logit then f32) drawn like every matrix at initialisation. Without it the
// output is added as it is (DeepSeek-MoE, DeepSeek-V3). Backward accumulates (+=) parameter
// gradients and returns dL/dy.
#pragma once

#include <string>

#include "base/rng.h"
#include "core/layers/dense_ffn.h"
#include "core/layers/parameters.h"
#include "types/moe_config.h"

namespace moe {

class SharedExperts {
 public:
  struct Saved {
    DenseFfn::Saved ffn;  // the FFN's (its input y among them)
    Tensor ungated;       // [T, D] act: FFN(y) before the gate (gated only)
    Tensor logit;         // [T, 1] F: y w (gated only)
  };
  SharedExperts(const std::string& prefix, const MoeLayerConfig& cfg, ParameterSet* params);
  // [in] y [T, D] act, the layer's (router's) input; token_offset, training, rng and
  // recompute_hidden as DenseFfn::forward's (the hidden dropout keyed by token). Returns s [T, D].
  StatusOr<Tensor> forward(const Tensor& y, int64_t token_offset, bool training, CounterRng rng,
                           Saved* saved, bool recompute_hidden) const;
  // [in] du [T, D] = dL/ds; returns dL/dy [T, D].
  StatusOr<Tensor> backward(const Tensor& du, const Saved& saved) const;

 private:
  Context& ctx_;
  DenseFfn ffn_;
  Parameter* w_gate_ = nullptr;  // null without the gate
};

}  // namespace moe
