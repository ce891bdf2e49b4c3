#include "core/layers/shared_experts.h"

#include "kernels/activation.h"
#include "kernels/gemm.h"

namespace moe {

SharedExperts::SharedExperts(const std::string& prefix, const MoeLayerConfig& cfg,
                             ParameterSet* params)
    : ctx_(params->context()),
      ffn_(prefix, cfg.d_model, cfg.shared_width(), cfg.activation, cfg.linear_bias,
           cfg.expert_dropout, params) {
  if (cfg.shared_expert_gate) {
    w_gate_ = &params->add(prefix + ".w_gate", {cfg.d_model, 1}, ParamKind::kDense, true, true);
  }
}

StatusOr<Tensor> SharedExperts::forward(const Tensor& y, int64_t token_offset, bool training,
                                        CounterRng rng, Saved* saved, bool recompute_hidden) const {
  MOE_ASSIGN_OR_RETURN(Tensor s,
                       ffn_.forward(y, token_offset, training, rng, &saved->ffn, recompute_hidden));
  if (w_gate_ == nullptr) return s;
  MOE_ASSIGN_OR_RETURN(saved->logit, ctx_.empty({y.dim(0), 1}, compute_dtype(y.dtype())));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, y, false, w_gate_->value, false, saved->logit));
  saved->ungated = s;
  MOE_ASSIGN_OR_RETURN(Tensor gated, ctx_.empty_like(s));
  MOE_RETURN_IF_ERROR(kernels::sigmoid_gate_forward(ctx_, s, saved->logit, gated));
  return gated;
}

StatusOr<Tensor> SharedExperts::backward(const Tensor& du, const Saved& saved) const {
  if (w_gate_ == nullptr) return ffn_.backward(du, saved.ffn);
  const Tensor& y = saved.ffn.x;
  MOE_ASSIGN_OR_RETURN(Tensor d_ungated, ctx_.empty_like(du));
  MOE_ASSIGN_OR_RETURN(Tensor d_logit, ctx_.empty({du.dim(0), 1}, du.dtype()));
  MOE_RETURN_IF_ERROR(
      kernels::sigmoid_gate_backward(ctx_, saved.ungated, saved.logit, du, d_ungated, d_logit));
  MOE_ASSIGN_OR_RETURN(Tensor d_y, ffn_.backward(d_ungated, saved.ffn));
  // logit = y w: dw += y^T d_logit; dy += d_logit w^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, y, true, d_logit, false, w_gate_->grad, 1.0, 1.0));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, d_logit, false, w_gate_->value, true, d_y, 1.0, 1.0));
  return d_y;
}

}  // namespace moe
