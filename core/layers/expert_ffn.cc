#include "core/layers/expert_ffn.h"

#include "kernels/gemm.h"

namespace moe {

kernels::Activation to_kernel_activation(ExpertActivation act) {
  switch (act) {
    case ExpertActivation::kRelu: return kernels::Activation::kRelu;
    case ExpertActivation::kGelu: return kernels::Activation::kGelu;
    case ExpertActivation::kGeluTanh: return kernels::Activation::kGeluTanh;
  }
  return kernels::Activation::kRelu;
}

ExpertFfn::ExpertFfn(const std::string& prefix, const MoeLayerConfig& cfg, int64_t local_experts,
                     int64_t first_expert, ParameterSet* params)
    : activation_(to_kernel_activation(cfg.activation)),
      local_experts_(local_experts),
      d_ff_(cfg.d_expert) {
  const int64_t e = cfg.num_experts, d = cfg.d_model, f = cfg.d_expert;
  w1_ = &params->add_expert(prefix + ".w1", {local_experts, d, f}, e, first_expert);
  b1_ = &params->add_expert(prefix + ".b1", {local_experts, f}, e, first_expert, false);
  w2_ = &params->add_expert(prefix + ".w2", {local_experts, f, d}, e, first_expert);
  b2_ = &params->add_expert(prefix + ".b2", {local_experts, d}, e, first_expert, false);
}

Status ExpertFfn::forward(const TensorView& x, const std::vector<int64_t>& offsets,
                          const TensorView& row_keys, CounterRng rng, float dropout_p,
                          const TensorView& y, ExpertSaved* saved) {
  const int64_t rows = x.dim(0);
  saved->x = Tensor::copy_of(x);
  saved->offsets = offsets;
  saved->row_keys = Tensor::copy_of(row_keys);
  saved->rng = rng;
  saved->dropout = dropout_p > 0;
  saved->h_pre = Tensor::empty({rows, d_ff_}, x.dtype());
  saved->h = Tensor::empty({rows, d_ff_}, x.dtype());
  MOE_RETURN_IF_ERROR(kernels::grouped_gemm(x, w1_->value, false, saved->h_pre, offsets));
  MOE_RETURN_IF_ERROR(kernels::add_bias_grouped(saved->h_pre, b1_->value, offsets));
  MOE_RETURN_IF_ERROR(kernels::activation_forward(activation_, saved->h_pre, saved->h));
  if (saved->dropout) {
    MOE_RETURN_IF_ERROR(kernels::dropout_forward(saved->h, row_keys, rng, dropout_p, saved->h));
  }
  MOE_RETURN_IF_ERROR(kernels::grouped_gemm(saved->h, w2_->value, false, y, offsets));
  return kernels::add_bias_grouped(y, b2_->value, offsets);
}

Status ExpertFfn::backward(const TensorView& dy, const ExpertSaved& saved, float dropout_p,
                           const TensorView& dx) {
  const int64_t rows = dy.dim(0);
  MOE_RETURN_IF_ERROR(kernels::grouped_gemm_wgrad(saved.h, dy, w2_->grad, saved.offsets, 1.0, 1.0));
  MOE_RETURN_IF_ERROR(kernels::bias_grad_grouped(dy, b2_->grad, saved.offsets));
  Tensor dh = Tensor::empty({rows, d_ff_}, dy.dtype());
  MOE_RETURN_IF_ERROR(kernels::grouped_gemm(dy, w2_->value, true, dh, saved.offsets));
  if (saved.dropout) {
    MOE_RETURN_IF_ERROR(kernels::dropout_backward(dh, saved.row_keys, saved.rng, dropout_p, dh));
  }
  MOE_RETURN_IF_ERROR(kernels::activation_backward(activation_, saved.h_pre, dh, dh));
  MOE_RETURN_IF_ERROR(kernels::grouped_gemm_wgrad(saved.x, dh, w1_->grad, saved.offsets, 1.0, 1.0));
  MOE_RETURN_IF_ERROR(kernels::bias_grad_grouped(dh, b1_->grad, saved.offsets));
  return kernels::grouped_gemm(dh, w1_->value, true, dx, saved.offsets);
}

}  // namespace moe
