#include "core/layers/layer_norm.h"

#include "kernels/layernorm.h"

namespace moe {

LayerNorm::LayerNorm(const std::string& prefix, int64_t d, ParameterSet* params, double eps,
                     NormKind kind)
    : prefix_(prefix), ctx_(params->context()), eps_(eps), kind_(kind) {
  gamma_ = &params->add(prefix + ".gamma", {d}, ParamKind::kDense, false);
  if (kind_ == NormKind::kLayerNorm) {
    beta_ = &params->add(prefix + ".beta", {d}, ParamKind::kDense, false);
  }
}

StatusOr<Tensor> LayerNorm::forward(const Tensor& x, Saved* saved) const {
  if (x.ndim() != 2) {
    return invalid_argument_error(prefix_, ": x must be [N, D], got ", x.view().to_string());
  }
  const DType f = compute_dtype(x.dtype());
  saved->x = x;
  saved->mean = Tensor();
  if (kind_ == NormKind::kLayerNorm) {
    MOE_ASSIGN_OR_RETURN(saved->mean, ctx_.empty({x.dim(0)}, f));
  }
  MOE_ASSIGN_OR_RETURN(saved->rstd, ctx_.empty({x.dim(0)}, f));
  MOE_ASSIGN_OR_RETURN(Tensor y, ctx_.empty_like(x));
  const Status s = kind_ == NormKind::kRmsNorm
                       ? kernels::rmsnorm_forward(ctx_, x, gamma_->value, eps_, y, saved->rstd)
                       : kernels::layernorm_forward(ctx_, x, gamma_->value, beta_->value, eps_, y,
                                                    saved->mean, saved->rstd);
  MOE_RETURN_IF_ERROR(s.with_context(prefix_));
  return y;
}

StatusOr<Tensor> LayerNorm::backward(const Tensor& dy, const Saved& saved) const {
  MOE_ASSIGN_OR_RETURN(Tensor dx, ctx_.empty_like(dy));
  const Status s = kind_ == NormKind::kRmsNorm
                       ? kernels::rmsnorm_backward(ctx_, dy, saved.x, gamma_->value, saved.rstd,
                                                   {dx, gamma_->grad})
                       : kernels::layernorm_backward(ctx_, dy, saved.x, gamma_->value, saved.mean,
                                                     saved.rstd, {dx, gamma_->grad, beta_->grad});
  MOE_RETURN_IF_ERROR(s.with_context(prefix_));
  return dx;
}

}  // namespace moe
