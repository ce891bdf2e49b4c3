#include "core/layers/dense_ffn.h"

#include "core/layers/expert_ffn.h"
#include "kernels/gemm.h"

namespace moe {

DenseFfn::DenseFfn(const std::string& prefix, int64_t d_model, int64_t d_ff,
                   ExpertActivation activation, bool bias, double dropout, ParameterSet* params)
    : prefix_(prefix),
      ctx_(params->context()),
      act_(params->act_dtype()),
      activation_(activation),
      dropout_(dropout),
      d_model_(d_model),
      d_ff_(d_ff) {
  const int64_t f1 = first_matrix_cols(activation, d_ff);
  w1_ = &params->add(prefix + ".w1", {d_model, f1}, ParamKind::kDense, true, true);
  if (bias) b1_ = &params->add(prefix + ".b1", {f1}, ParamKind::kDense, false);
  w2_ = &params->add(prefix + ".w2", {d_ff, d_model}, ParamKind::kDense, true, true);
  if (bias) b2_ = &params->add(prefix + ".b2", {d_model}, ParamKind::kDense, false);
}

Status DenseFfn::check(const char* name, const TensorView& t, int64_t rows) const {
  if (t.dtype() != act_ || t.shape() != Shape{rows, d_model_}) {
    return invalid_argument_error(prefix_, ": ", name, " is ", t.to_string(), ", expected ",
                                  dtype_name(act_), Shape{rows, d_model_}.to_string());
  }
  return Status::OK();
}

Status DenseFfn::hidden(const Saved& saved, Tensor* h_pre, Tensor* h) const {
  const int64_t n = saved.x.dim(0);
  MOE_ASSIGN_OR_RETURN(*h_pre, ctx_.empty({n, first_matrix_cols(activation_, d_ff_)}, act_));
  MOE_ASSIGN_OR_RETURN(*h, ctx_.empty({n, d_ff_}, act_));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, saved.x, false, w1_->value, false, *h_pre));
  if (b1_ != nullptr) MOE_RETURN_IF_ERROR(kernels::add_bias(ctx_, *h_pre, b1_->value));
  MOE_RETURN_IF_ERROR(ffn_activation_forward(ctx_, activation_, *h_pre, *h));
  if (saved.dropout > 0) {
    MOE_RETURN_IF_ERROR(
        kernels::dropout_forward(ctx_, *h, {}, saved.token_offset, saved.rng, saved.dropout, *h)
            .with_context(prefix_));
  }
  return Status::OK();
}

StatusOr<Tensor> DenseFfn::forward(const Tensor& x, int64_t token_offset, bool training,
                                   CounterRng rng, Saved* saved, bool recompute_hidden) const {
  const int64_t n = x.ndim() == 2 ? x.dim(0) : 0;
  MOE_RETURN_IF_ERROR(check("x", x, n));
  saved->x = x;
  saved->dropout = training ? static_cast<float>(dropout_) : 0.f;
  saved->rng = rng;
  saved->token_offset = token_offset;
  saved->recompute_hidden = recompute_hidden;
  Tensor h_pre, h;
  MOE_RETURN_IF_ERROR(hidden(*saved, &h_pre, &h));
  MOE_ASSIGN_OR_RETURN(Tensor y, ctx_.empty({n, d_model_}, act_));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, h, false, w2_->value, false, y));
  if (b2_ != nullptr) MOE_RETURN_IF_ERROR(kernels::add_bias(ctx_, y, b2_->value));
  saved->h_pre = recompute_hidden ? Tensor() : h_pre;
  saved->h = recompute_hidden ? Tensor() : h;
  return y;
}

StatusOr<Tensor> DenseFfn::backward(const Tensor& dy, const Saved& saved) const {
  const int64_t n = saved.x.dim(0);
  MOE_RETURN_IF_ERROR(check("dy", dy, n));
  Tensor h_pre = saved.h_pre, h = saved.h;
  if (saved.recompute_hidden) MOE_RETURN_IF_ERROR(hidden(saved, &h_pre, &h));
  // Second projection: dW2 += h^T dy; db2 += sum dy; dh = dy W2^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, h, true, dy, false, w2_->grad, 1.0, 1.0));
  h = Tensor();  // read no more (a recomputed one is freed)
  if (b2_ != nullptr) MOE_RETURN_IF_ERROR(kernels::bias_grad(ctx_, dy, b2_->grad));
  MOE_ASSIGN_OR_RETURN(Tensor dh, ctx_.empty({n, d_ff_}, act_));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, dy, false, w2_->value, true, dh));
  if (saved.dropout > 0) {
    MOE_RETURN_IF_ERROR(
        kernels::dropout_backward(ctx_, dh, {}, saved.token_offset, saved.rng, saved.dropout, dh));
  }
  MOE_ASSIGN_OR_RETURN(Tensor dh_pre, ffn_activation_backward(ctx_, activation_, h_pre, dh));
  // First projection: dW1 += x^T dh_pre; db1 += sum dh_pre; dx = dh_pre W1^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, saved.x, true, dh_pre, false, w1_->grad, 1.0, 1.0));
  if (b1_ != nullptr) MOE_RETURN_IF_ERROR(kernels::bias_grad(ctx_, dh_pre, b1_->grad));
  MOE_ASSIGN_OR_RETURN(Tensor dx, ctx_.empty({n, d_model_}, act_));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, dh_pre, false, w1_->value, true, dx));
  return dx;
}

}  // namespace moe
