#include "core/layers/expert_ffn.h"

#include "kernels/gemm.h"

namespace moe {

kernels::Activation to_kernel_activation(ExpertActivation act) {
  switch (act) {
    case ExpertActivation::kRelu:
      return kernels::Activation::kRelu;
    case ExpertActivation::kGelu:
      return kernels::Activation::kGelu;
    case ExpertActivation::kGeluTanh:
      return kernels::Activation::kGeluTanh;
    case ExpertActivation::kSwiglu:
      return kernels::Activation::kSilu;
  }
  return kernels::Activation::kRelu;
}

Status ffn_activation_forward(Context& ctx, ExpertActivation act, const TensorView& h_pre,
                              const TensorView& h) {
  if (is_gated(act)) return kernels::swiglu_forward(ctx, h_pre, h);
  return kernels::activation_forward(ctx, to_kernel_activation(act), h_pre, h);
}

StatusOr<Tensor> ffn_activation_backward(Context& ctx, ExpertActivation act, const Tensor& h_pre,
                                         const Tensor& dh) {
  if (!is_gated(act)) {
    MOE_RETURN_IF_ERROR(
        kernels::activation_backward(ctx, to_kernel_activation(act), h_pre, dh, dh));
    return dh;
  }
  MOE_ASSIGN_OR_RETURN(Tensor dh_pre, ctx.empty_like(h_pre));
  MOE_RETURN_IF_ERROR(kernels::swiglu_backward(ctx, h_pre, dh, dh_pre));
  return dh_pre;
}

ExpertFfn::ExpertFfn(const std::string& prefix, const MoeLayerConfig& cfg, int64_t local_experts,
                     int64_t first_expert, ParameterSet* params)
    : ctx_(params->context()),
      act_(params->act_dtype()),
      activation_(cfg.activation),
      local_experts_(local_experts),
      d_model_(cfg.d_model),
      d_ff_(cfg.d_expert) {
  const int64_t e = cfg.num_experts, d = cfg.d_model, f = cfg.d_expert;
  const int64_t f1 = first_matrix_cols(cfg.activation, f);
  w1_ = &params->add_expert(prefix + ".w1", {local_experts, d, f1}, e, first_expert, true, true);
  if (cfg.linear_bias) {
    b1_ = &params->add_expert(prefix + ".b1", {local_experts, f1}, e, first_expert, false);
  }
  w2_ = &params->add_expert(prefix + ".w2", {local_experts, f, d}, e, first_expert, true, true);
  if (cfg.linear_bias) {
    b2_ = &params->add_expert(prefix + ".b2", {local_experts, d}, e, first_expert, false);
  }
}

Status ExpertFfn::hidden(const ExpertSaved& saved, Tensor* h_pre, Tensor* h) const {
  const int64_t rows = saved.x.dim(0);
  MOE_ASSIGN_OR_RETURN(*h_pre, ctx_.empty({rows, first_matrix_cols(activation_, d_ff_)}, act_));
  MOE_ASSIGN_OR_RETURN(*h, ctx_.empty({rows, d_ff_}, act_));
  MOE_RETURN_IF_ERROR(kernels::expert_gemm(ctx_, saved.x, w1_->value, false, *h_pre, saved.blocks));
  if (b1_ != nullptr) {
    MOE_RETURN_IF_ERROR(kernels::add_bias_blocks(ctx_, *h_pre, b1_->value, saved.blocks));
  }
  MOE_RETURN_IF_ERROR(ffn_activation_forward(ctx_, activation_, *h_pre, *h));
  if (saved.dropout > 0) {
    MOE_RETURN_IF_ERROR(
        kernels::dropout_forward(ctx_, *h, saved.row_keys, 0, saved.rng, saved.dropout, *h));
  }
  return Status::OK();
}

StatusOr<Tensor> ExpertFfn::forward(const Tensor& x, const kernels::ExpertBlocks& blocks,
                                    const Tensor& row_keys, CounterRng rng, float dropout_p,
                                    ExpertSaved* saved, bool recompute_hidden) {
  const int64_t rows = x.dim(0);
  saved->x = x;
  saved->blocks = blocks;
  saved->row_keys = row_keys;
  saved->rng = rng;
  saved->dropout = dropout_p;
  saved->recompute_hidden = recompute_hidden;
  Tensor h_pre, h;
  MOE_RETURN_IF_ERROR(hidden(*saved, &h_pre, &h));
  MOE_ASSIGN_OR_RETURN(Tensor y, ctx_.empty({rows, d_model_}, act_));
  MOE_RETURN_IF_ERROR(kernels::expert_gemm(ctx_, h, w2_->value, false, y, blocks));
  if (b2_ != nullptr) {
    MOE_RETURN_IF_ERROR(kernels::add_bias_blocks(ctx_, y, b2_->value, blocks));
  }
  saved->h_pre = recompute_hidden ? Tensor() : h_pre;
  saved->h = recompute_hidden ? Tensor() : h;
  return y;
}

StatusOr<Tensor> ExpertFfn::backward(const Tensor& dy, const ExpertSaved& saved) {
  const int64_t rows = dy.dim(0);
  const kernels::ExpertBlocks& blocks = saved.blocks;
  Tensor h_pre = saved.h_pre, h = saved.h;
  if (saved.recompute_hidden) MOE_RETURN_IF_ERROR(hidden(saved, &h_pre, &h));
  MOE_RETURN_IF_ERROR(kernels::expert_gemm_wgrad(ctx_, h, dy, w2_->grad, blocks));
  h = Tensor();  // read no more (a recomputed one is freed)
  if (b2_ != nullptr) {
    MOE_RETURN_IF_ERROR(kernels::bias_grad_blocks(ctx_, dy, b2_->grad, blocks));
  }
  MOE_ASSIGN_OR_RETURN(Tensor dh, ctx_.empty({rows, d_ff_}, act_));
  MOE_RETURN_IF_ERROR(kernels::expert_gemm(ctx_, dy, w2_->value, true, dh, blocks));
  if (saved.dropout > 0) {
    MOE_RETURN_IF_ERROR(
        kernels::dropout_backward(ctx_, dh, saved.row_keys, 0, saved.rng, saved.dropout, dh));
  }
  MOE_ASSIGN_OR_RETURN(Tensor dh_pre, ffn_activation_backward(ctx_, activation_, h_pre, dh));
  MOE_RETURN_IF_ERROR(kernels::expert_gemm_wgrad(ctx_, saved.x, dh_pre, w1_->grad, blocks));
  if (b1_ != nullptr) {
    MOE_RETURN_IF_ERROR(kernels::bias_grad_blocks(ctx_, dh_pre, b1_->grad, blocks));
  }
  MOE_ASSIGN_OR_RETURN(Tensor dx, ctx_.empty({rows, d_model_}, act_));
  MOE_RETURN_IF_ERROR(kernels::expert_gemm(ctx_, dh_pre, w1_->value, true, dx, blocks));
  return dx;
}

}  // namespace moe
