#include "core/layers/embedding.h"

#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/optimizer.h"

namespace moe {

Embedding::Embedding(const std::string& prefix, int64_t vocab, int64_t d_model, int64_t seq_len,
                     ParameterSet* params)
    : seq_len_(seq_len) {
  tokens_ = &params->add(prefix + ".tokens", {vocab, d_model});
  positions_ = &params->add(prefix + ".positions", {seq_len, d_model});
}

Status Embedding::forward(const TensorView& ids, const TensorView& h) const {
  if (ids.ndim() != 2 || ids.dim(1) != seq_len_) {
    return invalid_argument_error("embedding: ids ", ids.to_string(), " are not [B, ", seq_len_, "]");
  }
  const int64_t batch = ids.dim(0);
  MOE_RETURN_IF_ERROR(kernels::embedding_forward(ids.reshape({batch * seq_len_}), tokens_->value, h));
  for (int64_t b = 0; b < batch; ++b) {
    MOE_RETURN_IF_ERROR(kernels::add(h.rows(b * seq_len_, (b + 1) * seq_len_), positions_->value,
                                     h.rows(b * seq_len_, (b + 1) * seq_len_)));
  }
  return Status::OK();
}

Status Embedding::backward(const TensorView& ids, const TensorView& dh) const {
  const int64_t batch = ids.dim(0);
  MOE_RETURN_IF_ERROR(kernels::embedding_backward(ids.reshape({batch * seq_len_}), dh, tokens_->grad));
  for (int64_t b = 0; b < batch; ++b) {
    MOE_RETURN_IF_ERROR(kernels::axpy(1.0, dh.rows(b * seq_len_, (b + 1) * seq_len_), positions_->grad));
  }
  return Status::OK();
}

OutputHead::OutputHead(const std::string& prefix, int64_t vocab, int64_t d_model, Parameter* tied,
                       ParameterSet* params) {
  weight_ = tied != nullptr ? tied : &params->add(prefix + ".weight", {vocab, d_model});
}

Status OutputHead::forward(const TensorView& h, const TensorView& logits) const {
  return kernels::gemm(h, false, weight_->value, true, logits);
}

Status OutputHead::backward(const TensorView& h, const TensorView& d_logits,
                            const TensorView& dh) const {
  MOE_RETURN_IF_ERROR(kernels::gemm(d_logits, true, h, false, weight_->grad, 1.0, 1.0));
  return kernels::gemm(d_logits, false, weight_->value, false, dh);
}

}  // namespace moe
