#include "core/layers/embedding.h"

#include "kernels/embedding.h"
#include "kernels/gemm.h"

namespace moe {

Embedding::Embedding(const std::string& prefix, int64_t vocab, int64_t d_model, int64_t max_seq_len,
                     ParameterSet* params, bool learned_positions)
    : prefix_(prefix),
      ctx_(params->context()),
      act_(params->act_dtype()),
      d_model_(d_model),
      max_seq_len_(max_seq_len),
      positions_(nullptr) {
  tokens_ = &params->add(prefix + ".tokens", {vocab, d_model}, ParamKind::kDense, true, true);
  if (learned_positions) {
    positions_ = &params->add(prefix + ".positions", {max_seq_len, d_model});
  }
}

Status Embedding::check_ids(const TensorView& ids) const {
  if (ids.dtype() != DType::kI32 || ids.ndim() != 2 || ids.dim(1) < 1 ||
      ids.dim(1) > max_seq_len_) {
    return invalid_argument_error(prefix_, ": ids ", ids.to_string(),
                                  " are not i32[B, S] with 1 <= S <= ", max_seq_len_);
  }
  return Status::OK();
}

StatusOr<Tensor> Embedding::forward(const TensorView& ids) const {
  MOE_RETURN_IF_ERROR(check_ids(ids));
  const int64_t batch = ids.dim(0), seq = ids.dim(1);
  MOE_ASSIGN_OR_RETURN(Tensor h, ctx_.empty({batch * seq, d_model_}, act_));
  const TensorView positions = positions_ != nullptr ? positions_->value : TensorView();
  MOE_RETURN_IF_ERROR(kernels::embedding_forward(ctx_, ids.reshape({batch * seq}), tokens_->value,
                                                 positions, seq, h)
                          .with_context(prefix_));
  return h;
}

Status Embedding::backward(const TensorView& ids, const TensorView& dh) const {
  MOE_RETURN_IF_ERROR(check_ids(ids));
  const int64_t batch = ids.dim(0), seq = ids.dim(1);
  if (dh.shape() != Shape{batch * seq, d_model_} || dh.dtype() != act_) {
    return invalid_argument_error(prefix_, ": dh is ", dh.to_string(), ", expected ",
                                  dtype_name(act_), Shape{batch * seq, d_model_}.to_string());
  }
  const TensorView d_positions = positions_ != nullptr ? positions_->grad : TensorView();
  return kernels::embedding_backward(ctx_, ids.reshape({batch * seq}), dh, tokens_->grad,
                                     d_positions, seq)
      .with_context(prefix_);
}

OutputHead::OutputHead(const std::string& prefix, int64_t vocab, int64_t d_model, Parameter* tied,
                       ParameterSet* params)
    : prefix_(prefix), ctx_(params->context()), act_(params->act_dtype()), tied_(tied != nullptr) {
  weight_ = tied != nullptr
                ? tied
                : &params->add(prefix + ".weight", {vocab, d_model}, ParamKind::kDense, true, true);
}

Status OutputHead::check(const char* name, const TensorView& t, int64_t cols) const {
  if (t.ndim() != 2 || t.dtype() != act_ || t.dim(1) != cols) {
    return invalid_argument_error(prefix_, ": ", name, " is ", t.to_string(), ", expected ",
                                  dtype_name(act_), "[N, ", cols, "]");
  }
  return Status::OK();
}

StatusOr<Tensor> OutputHead::forward(const TensorView& h) const {
  const int64_t vocab = weight_->shape[0], d = weight_->shape[1];
  MOE_RETURN_IF_ERROR(check("h", h, d));
  MOE_ASSIGN_OR_RETURN(Tensor logits, ctx_.empty({h.dim(0), vocab}, compute_dtype(act_)));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, h, false, weight_->value, true, logits));
  return logits;
}

StatusOr<Tensor> OutputHead::backward(const TensorView& h, const TensorView& d_logits) const {
  MOE_RETURN_IF_ERROR(check("h", h, weight_->shape[1]));
  MOE_ASSIGN_OR_RETURN(Tensor dh, ctx_.empty({h.dim(0), weight_->shape[1]}, act_));
  MOE_RETURN_IF_ERROR(backward_into(h, d_logits, dh));
  return dh;
}

Status OutputHead::backward_into(const TensorView& h, const TensorView& d_logits,
                                 const TensorView& dh) const {
  const int64_t vocab = weight_->shape[0], d = weight_->shape[1];
  MOE_RETURN_IF_ERROR(check("h", h, d));
  MOE_RETURN_IF_ERROR(check("d_logits", d_logits, vocab));
  MOE_RETURN_IF_ERROR(check("dh", dh, d));
  if (d_logits.dim(0) != h.dim(0) || dh.dim(0) != h.dim(0)) {
    return invalid_argument_error(prefix_, ": d_logits ", d_logits.to_string(), " and dh ",
                                  dh.to_string(), " do not have the ", h.dim(0), " rows of h");
  }
  // dW [V, D] += d_logits^T h; dh = d_logits W.
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, d_logits, true, h, false, weight_->grad, 1.0, 1.0));
  return kernels::gemm(ctx_, d_logits, false, weight_->value, false, dh);
}

}  // namespace moe
