// Normalisation sublayer over the last dimension (kernels/layernorm.h), LayerNorm or RMSNorm by
// the model's NormKind:
//   kLayerNorm: y = (x - mean) * rstd * gamma + beta;
//   kRmsNorm:   y = x * rstd * gamma, rstd = 1 / sqrt(mean_j x^2 + eps) (no centring, no beta).
// Parameters: <prefix>.gamma [D] (the model initialises it to 1) and, for LayerNorm only,
// <prefix>.beta [D] (0); neither is weight-decayed, both stay full precision. x, y are
// activations (act); mean and rstd are F. Forward returns a new y and saves x (shared, not
// copied) with rstd (and mean, LayerNorm only); backward returns a new dx and accumulates (+=) the
// gamma (and beta) gradients. Errors name the layer's prefix.
#pragma once

#include <string>

#include "core/layers/parameters.h"
#include "types/model_config.h"

namespace moe {

class LayerNorm {
 public:
  struct Saved {
    Tensor x;           // [N, D] the input
    Tensor mean, rstd;  // [N] F; mean stays empty under RMSNorm
  };
  LayerNorm(const std::string& prefix, int64_t d, ParameterSet* params, double eps = 1e-5,
            NormKind kind = NormKind::kLayerNorm);
  // [in] x [N, D]; returns y [N, D]; fills saved.
  StatusOr<Tensor> forward(const Tensor& x, Saved* saved) const;
  // [in] dy [N, D]; returns dx [N, D].
  StatusOr<Tensor> backward(const Tensor& dy, const Saved& saved) const;

 private:
  std::string prefix_;
  Context& ctx_;
  double eps_;
  NormKind kind_;
  Parameter* gamma_;
  Parameter* beta_ = nullptr;  // LayerNorm only
};

}  // namespace moe
