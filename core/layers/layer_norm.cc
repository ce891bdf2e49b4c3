#include "core/layers/layer_norm.h"

#include "kernels/layernorm.h"

namespace moe {

LayerNorm::LayerNorm(const std::string& prefix, int64_t d, ParameterSet* params, double eps)
    : prefix_(prefix), eps_(eps) {
  gamma_ = &params->add(prefix + ".gamma", {d}, ParamKind::kDense, false);
  beta_ = &params->add(prefix + ".beta", {d}, ParamKind::kDense, false);
}

Status LayerNorm::forward(const TensorView& x, const TensorView& y, Saved* saved) const {
  if (x.ndim() != 2) {
    return invalid_argument_error(prefix_, ": x must be [N, D], got ", x.to_string());
  }
  // x is copied first, so y may alias x.
  saved->x = Tensor::copy_of(x);
  saved->mean = Tensor::empty({x.dim(0)}, x.dtype());
  saved->rstd = Tensor::empty({x.dim(0)}, x.dtype());
  return kernels::layernorm_forward(saved->x, gamma_->value, beta_->value, eps_, y, saved->mean,
                                    saved->rstd)
      .with_context(prefix_);
}

Status LayerNorm::backward(const TensorView& dy, const Saved& saved, const TensorView& dx) const {
  return kernels::layernorm_backward(dy, saved.x, gamma_->value, saved.mean, saved.rstd, dx,
                                     gamma_->grad, beta_->grad)
      .with_context(prefix_);
}

}  // namespace moe
