#include "core/layers/attention.h"

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"

namespace moe {
namespace {

// x [N, C] += b [C] on every row.
Status add_bias(const TensorView& x, const Parameter& b) {
  return kernels::add_bias_grouped(x, b.value.view().reshape({1, b.value.numel()}), {0, x.dim(0)});
}
// db [C] += column sums of dy [N, C].
Status bias_grad(const TensorView& dy, const Parameter& b) {
  return kernels::bias_grad_grouped(dy, b.grad.view().reshape({1, b.grad.numel()}), {0, dy.dim(0)});
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(const std::string& prefix, int64_t d_model, int64_t heads,
                                       int64_t max_seq_len, double attention_dropout,
                                       ParameterSet* params)
    : prefix_(prefix),
      d_model_(d_model),
      heads_(heads),
      max_seq_len_(max_seq_len),
      attention_dropout_(attention_dropout) {
  w_qkv_ = &params->add(prefix + ".w_qkv", {d_model, 3 * d_model});
  b_qkv_ = &params->add(prefix + ".b_qkv", {3 * d_model}, ParamKind::kDense, false);
  w_o_ = &params->add(prefix + ".w_o", {d_model, d_model});
  b_o_ = &params->add(prefix + ".b_o", {d_model}, ParamKind::kDense, false);
}

Status MultiHeadAttention::check(const char* name, const TensorView& t, int64_t rows) const {
  const DType dtype = w_qkv_->value.dtype();
  if (t.dtype() != dtype || t.shape() != Shape{rows, d_model_}) {
    return invalid_argument_error(prefix_, ": ", name, " is ", t.to_string(), ", expected ",
                                  dtype_name(dtype), Shape{rows, d_model_}.to_string());
  }
  return Status::OK();
}

Status MultiHeadAttention::forward(const TensorView& x, int64_t batch, int64_t sequence_offset,
                                   bool training, CounterRng rng, const TensorView& y,
                                   Saved* saved) const {
  const int64_t n = x.ndim() == 2 ? x.dim(0) : -1;
  if (batch < 1 || n % batch != 0 || n / batch < 1 || n / batch > max_seq_len_) {
    return invalid_argument_error(prefix_, ": x ", x.to_string(),
                                  " is not [B*S, D] with B = ", batch,
                                  " and 1 <= S <= ", max_seq_len_);
  }
  MOE_RETURN_IF_ERROR(check("x", x, n));
  MOE_RETURN_IF_ERROR(check("y", y, n));
  const int64_t seq = n / batch;
  saved->x = Tensor::copy_of(x);
  saved->batch = batch;
  saved->seq_len = seq;
  saved->sequence_offset = sequence_offset;
  saved->dropout = training ? static_cast<float>(attention_dropout_) : 0.f;
  saved->rng = rng;
  saved->qkv = Tensor::empty({n, 3 * d_model_}, x.dtype());
  MOE_RETURN_IF_ERROR(kernels::gemm(x, false, w_qkv_->value, false, saved->qkv));
  MOE_RETURN_IF_ERROR(add_bias(saved->qkv, *b_qkv_));
  saved->probs = Tensor::empty({batch, heads_, seq, seq}, x.dtype());
  saved->ctx = Tensor::empty({n, d_model_}, x.dtype());
  const kernels::AttentionArgs args{batch, seq, heads_, saved->dropout, rng, sequence_offset};
  MOE_RETURN_IF_ERROR(
      kernels::attention_forward(args, saved->qkv, saved->ctx, saved->probs).with_context(prefix_));
  MOE_RETURN_IF_ERROR(kernels::gemm(saved->ctx, false, w_o_->value, false, y));
  return add_bias(y, *b_o_);
}

Status MultiHeadAttention::backward(const TensorView& dy, const Saved& saved,
                                    const TensorView& dx) const {
  const int64_t n = saved.x.dim(0);
  MOE_RETURN_IF_ERROR(check("dy", dy, n));
  MOE_RETURN_IF_ERROR(check("dx", dx, n));
  // Output projection: dW_o += ctx^T dy; db_o += sum dy; d_ctx = dy W_o^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(saved.ctx, true, dy, false, w_o_->grad, 1.0, 1.0));
  MOE_RETURN_IF_ERROR(bias_grad(dy, *b_o_));
  Tensor d_ctx = Tensor::empty({n, d_model_}, dy.dtype());
  MOE_RETURN_IF_ERROR(kernels::gemm(dy, false, w_o_->value, true, d_ctx));
  Tensor d_qkv = Tensor::empty({n, 3 * d_model_}, dy.dtype());
  const kernels::AttentionArgs args{saved.batch,   saved.seq_len, heads_,
                                    saved.dropout, saved.rng,     saved.sequence_offset};
  MOE_RETURN_IF_ERROR(kernels::attention_backward(args, d_ctx, saved.qkv, saved.probs, d_qkv)
                          .with_context(prefix_));
  // Input projection: dW_qkv += x^T d_qkv; db_qkv += sum d_qkv; dx = d_qkv W_qkv^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(saved.x, true, d_qkv, false, w_qkv_->grad, 1.0, 1.0));
  MOE_RETURN_IF_ERROR(bias_grad(d_qkv, *b_qkv_));
  return kernels::gemm(d_qkv, false, w_qkv_->value, true, dx);
}

}  // namespace moe
