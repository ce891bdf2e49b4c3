// Dense feed-forward sublayer: y = dropout(act(x W1 + b1)) W2 + b2, with the hidden dropout keyed
// by global token id (independent of batch splits).
// Parameters: <prefix>.w1 [D, F], <prefix>.b1 [F], <prefix>.w2 [F, D], <prefix>.b2 [D].
#pragma once

#include <string>

#include "core/base/moe_config.h"
#include "core/base/rng.h"
#include "core/layers/parameters.h"
#include "kernels/activation.h"

namespace moe {

class DenseFfn {
 public:
  struct Saved {
    Tensor x, h_pre, h;  // [N, D], [N, F], [N, F]
    Tensor keys;         // [N] i64 token ids (dropout keys)
    float dropout = 0.f;
    CounterRng rng;
  };
  DenseFfn(const std::string& prefix, int64_t d_model, int64_t d_ff, ExpertActivation activation,
           double dropout, ParameterSet* params);
  Status forward(const TensorView& x, int64_t token_offset, bool training, CounterRng rng,
                 const TensorView& y, Saved* saved) const;
  Status backward(const TensorView& dy, const Saved& saved, const TensorView& dx) const;

 private:
  kernels::Activation activation_;
  double dropout_;
  int64_t d_ff_;
  Parameter* w1_;
  Parameter* b1_;
  Parameter* w2_;
  Parameter* b2_;
};

}  // namespace moe
