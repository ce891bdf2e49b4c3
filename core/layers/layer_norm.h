// LayerNorm sublayer over the last dimension (kernels/layernorm.h):
//   y = (x - mean) * rstd * gamma + beta.
// Parameters: <prefix>.gamma [D] (the model initialises it to 1), <prefix>.beta [D] (0); neither
// is weight-decayed. Forward overwrites y; backward overwrites dx and accumulates (+=) the gamma
// and beta gradients. Errors name the layer's prefix.
#pragma once

#include <string>

#include "core/layers/parameters.h"

namespace moe {

class LayerNorm {
 public:
  struct Saved {
    Tensor x;           // [N, D] the input
    Tensor mean, rstd;  // [N]
  };
  LayerNorm(const std::string& prefix, int64_t d, ParameterSet* params, double eps = 1e-5);
  // [in] x [N, D]; [out] y [N, D], overwritten (may alias x); fills saved.
  Status forward(const TensorView& x, const TensorView& y, Saved* saved) const;
  // [in] dy [N, D]; [out] dx [N, D], overwritten (may alias dy).
  Status backward(const TensorView& dy, const Saved& saved, const TensorView& dx) const;

 private:
  std::string prefix_;
  double eps_;
  Parameter* gamma_;
  Parameter* beta_;
};

}  // namespace moe
