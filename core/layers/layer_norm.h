// LayerNorm sublayer: <prefix>.gamma [D] (init 1), <prefix>.beta [D] (init 0), eps 1e-5.
#pragma once

#include <string>

#include "core/layers/parameters.h"

namespace moe {

class LayerNorm {
 public:
  struct Saved {
    Tensor x;           // [N, D]
    Tensor mean, rstd;  // [N]
  };
  LayerNorm(const std::string& prefix, int64_t d, ParameterSet* params, double eps = 1e-5);
  // y [N, D] overwritten (may alias x).
  Status forward(const TensorView& x, const TensorView& y, Saved* saved) const;
  // dx overwritten (may alias dy); gamma/beta gradients accumulate.
  Status backward(const TensorView& dy, const Saved& saved, const TensorView& dx) const;

 private:
  double eps_;
  Parameter* gamma_;
  Parameter* beta_;
};

}  // namespace moe
