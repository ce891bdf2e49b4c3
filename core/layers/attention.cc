#include "core/layers/attention.h"

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/layernorm.h"
#include "kernels/rope.h"

namespace moe {

MultiHeadAttention::MultiHeadAttention(const std::string& prefix, int64_t d_model, int64_t heads,
                                       int64_t max_seq_len, double attention_dropout,
                                       ParameterSet* params, const AttentionOptions& options)
    : prefix_(prefix),
      ctx_(params->context()),
      act_(params->act_dtype()),
      d_model_(d_model),
      heads_(heads),
      max_seq_len_(max_seq_len),
      attention_dropout_(attention_dropout),
      rope_base_(options.rope_base),
      norm_eps_(options.norm_eps),
      b_qkv_(nullptr),
      b_o_(nullptr) {
  w_qkv_ = &params->add(prefix + ".w_qkv", {d_model, 3 * d_model}, ParamKind::kDense, true, true);
  if (options.bias) {
    b_qkv_ = &params->add(prefix + ".b_qkv", {3 * d_model}, ParamKind::kDense, false);
  }
  w_o_ = &params->add(prefix + ".w_o", {d_model, d_model}, ParamKind::kDense, true, true);
  if (options.bias) b_o_ = &params->add(prefix + ".b_o", {d_model}, ParamKind::kDense, false);
  if (options.qk_norm) {
    const int64_t dh = d_model / heads;
    q_norm_ = &params->add(prefix + ".q_norm.gamma", {dh}, ParamKind::kDense, false);
    k_norm_ = &params->add(prefix + ".k_norm.gamma", {dh}, ParamKind::kDense, false);
  }
}

Status MultiHeadAttention::qk_norm_forward(const Tensor& qkv, Saved* saved) const {
  const int64_t n = qkv.dim(0), d = d_model_, rows = n * heads_, dh = d / heads_;
  Tensor* in[2] = {&saved->q_in, &saved->k_in};
  Tensor* rstd[2] = {&saved->q_rstd, &saved->k_rstd};
  const Parameter* gamma[2] = {q_norm_, k_norm_};
  MOE_ASSIGN_OR_RETURN(Tensor normed, ctx_.empty({n, d}, act_));
  for (int p = 0; p < 2; ++p) {  // q (columns [0, D)), then k ([D, 2D))
    MOE_ASSIGN_OR_RETURN(*in[p], ctx_.empty({n, d}, act_));
    MOE_ASSIGN_OR_RETURN(*rstd[p], ctx_.empty({rows}, compute_dtype(act_)));
    MOE_RETURN_IF_ERROR(kernels::copy_columns(ctx_, qkv, p * d, *in[p], 0, d));
    MOE_RETURN_IF_ERROR(kernels::rmsnorm_forward(ctx_, in[p]->reshape({rows, dh}), gamma[p]->value,
                                                 norm_eps_, normed.reshape({rows, dh}), *rstd[p]));
    MOE_RETURN_IF_ERROR(kernels::copy_columns(ctx_, normed, 0, qkv, p * d, d));
  }
  return Status::OK();
}

Status MultiHeadAttention::qk_norm_backward(const Tensor& d_qkv, const Saved& saved) const {
  const int64_t n = d_qkv.dim(0), d = d_model_, rows = n * heads_, dh = d / heads_;
  const Tensor* in[2] = {&saved.q_in, &saved.k_in};
  const Tensor* rstd[2] = {&saved.q_rstd, &saved.k_rstd};
  const Parameter* gamma[2] = {q_norm_, k_norm_};
  MOE_ASSIGN_OR_RETURN(Tensor part, ctx_.empty({n, d}, act_));
  for (int p = 0; p < 2; ++p) {
    MOE_RETURN_IF_ERROR(kernels::copy_columns(ctx_, d_qkv, p * d, part, 0, d));
    const TensorView rows_view = part.reshape({rows, dh});
    MOE_RETURN_IF_ERROR(kernels::rmsnorm_backward(ctx_, rows_view, in[p]->reshape({rows, dh}),
                                                  gamma[p]->value, *rstd[p],
                                                  {rows_view, gamma[p]->grad}));
    MOE_RETURN_IF_ERROR(kernels::copy_columns(ctx_, part, 0, d_qkv, p * d, d));
  }
  return Status::OK();
}

Status MultiHeadAttention::check(const char* name, const TensorView& t, int64_t rows) const {
  if (t.dtype() != act_ || t.shape() != Shape{rows, d_model_}) {
    return invalid_argument_error(prefix_, ": ", name, " is ", t.to_string(), ", expected ",
                                  dtype_name(act_), Shape{rows, d_model_}.to_string());
  }
  return Status::OK();
}

StatusOr<Tensor> MultiHeadAttention::forward(const Tensor& x, int64_t batch,
                                             int64_t sequence_offset, bool training, CounterRng rng,
                                             Saved* saved) const {
  const int64_t n = x.ndim() == 2 ? x.dim(0) : -1;
  if (batch < 1 || n % batch != 0 || n / batch < 1 || n / batch > max_seq_len_) {
    return invalid_argument_error(prefix_, ": x ", x.view().to_string(),
                                  " is not [B*S, D] with B = ", batch,
                                  " and 1 <= S <= ", max_seq_len_);
  }
  MOE_RETURN_IF_ERROR(check("x", x, n));
  const int64_t seq = n / batch;
  saved->x = x;
  saved->batch = batch;
  saved->seq_len = seq;
  saved->sequence_offset = sequence_offset;
  saved->dropout = training ? static_cast<float>(attention_dropout_) : 0.f;
  saved->rng = rng;
  MOE_ASSIGN_OR_RETURN(saved->qkv, ctx_.empty({n, 3 * d_model_}, act_));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, x, false, w_qkv_->value, false, saved->qkv));
  if (b_qkv_ != nullptr) {
    MOE_RETURN_IF_ERROR(kernels::add_bias(ctx_, saved->qkv, b_qkv_->value));
  }
  if (q_norm_ != nullptr) MOE_RETURN_IF_ERROR(qk_norm_forward(saved->qkv, saved));
  if (rope_base_ > 0) {
    const kernels::RopeArgs rope{batch, seq, heads_, rope_base_};
    MOE_RETURN_IF_ERROR(
        kernels::rope_forward(ctx_, rope, saved->qkv, saved->qkv).with_context(prefix_));
  }
  MOE_ASSIGN_OR_RETURN(saved->lse, ctx_.empty({batch, heads_, seq}, compute_dtype(act_)));
  MOE_ASSIGN_OR_RETURN(saved->ctx, ctx_.empty({n, d_model_}, act_));
  const kernels::AttentionArgs args{batch, seq, heads_, saved->dropout, rng, sequence_offset};
  MOE_RETURN_IF_ERROR(kernels::attention_forward(ctx_, args, saved->qkv, saved->ctx, saved->lse)
                          .with_context(prefix_));
  MOE_ASSIGN_OR_RETURN(Tensor y, ctx_.empty({n, d_model_}, act_));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, saved->ctx, false, w_o_->value, false, y));
  if (b_o_ != nullptr) MOE_RETURN_IF_ERROR(kernels::add_bias(ctx_, y, b_o_->value));
  return y;
}

StatusOr<Tensor> MultiHeadAttention::backward(const Tensor& dy, const Saved& saved) const {
  const int64_t n = saved.x.dim(0);
  MOE_RETURN_IF_ERROR(check("dy", dy, n));
  // Output projection: dW_o += ctx^T dy; db_o += sum dy; d_ctx = dy W_o^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, saved.ctx, true, dy, false, w_o_->grad, 1.0, 1.0));
  if (b_o_ != nullptr) MOE_RETURN_IF_ERROR(kernels::bias_grad(ctx_, dy, b_o_->grad));
  MOE_ASSIGN_OR_RETURN(Tensor d_ctx, ctx_.empty({n, d_model_}, act_));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, dy, false, w_o_->value, true, d_ctx));
  MOE_ASSIGN_OR_RETURN(Tensor d_qkv, ctx_.empty({n, 3 * d_model_}, act_));
  const kernels::AttentionArgs args{saved.batch,   saved.seq_len, heads_,
                                    saved.dropout, saved.rng,     saved.sequence_offset};
  MOE_RETURN_IF_ERROR(
      kernels::attention_backward(ctx_, args, d_ctx, saved.qkv, saved.ctx, saved.lse, d_qkv)
          .with_context(prefix_));
  if (rope_base_ > 0) {  // d_qkv of the rotated qkv -> of the projection's output
    const kernels::RopeArgs rope{saved.batch, saved.seq_len, heads_, rope_base_};
    MOE_RETURN_IF_ERROR(kernels::rope_backward(ctx_, rope, d_qkv, d_qkv).with_context(prefix_));
  }
  if (q_norm_ != nullptr) MOE_RETURN_IF_ERROR(qk_norm_backward(d_qkv, saved));
  // Input projection: dW_qkv += x^T d_qkv; db_qkv += sum d_qkv; dx = d_qkv W_qkv^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, saved.x, true, d_qkv, false, w_qkv_->grad, 1.0, 1.0));
  if (b_qkv_ != nullptr) MOE_RETURN_IF_ERROR(kernels::bias_grad(ctx_, d_qkv, b_qkv_->grad));
  MOE_ASSIGN_OR_RETURN(Tensor dx, ctx_.empty({n, d_model_}, act_));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, d_qkv, false, w_qkv_->value, true, dx));
  return dx;
}

}  // namespace moe
