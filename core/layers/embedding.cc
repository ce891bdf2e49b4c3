#include "core/layers/embedding.h"

#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"

namespace moe {
namespace {

// t has the parameters' dtype and shape [rows, cols].
Status check_matrix(const std::string& layer, const char* name, const TensorView& t, DType dtype,
                    int64_t rows, int64_t cols) {
  if (t.dtype() != dtype || t.shape() != Shape{rows, cols}) {
    return invalid_argument_error(layer, ": ", name, " is ", t.to_string(), ", expected ",
                                  dtype_name(dtype), Shape{rows, cols}.to_string());
  }
  return Status::OK();
}

}  // namespace

Embedding::Embedding(const std::string& prefix, int64_t vocab, int64_t d_model, int64_t max_seq_len,
                     ParameterSet* params)
    : prefix_(prefix), d_model_(d_model), max_seq_len_(max_seq_len) {
  tokens_ = &params->add(prefix + ".tokens", {vocab, d_model});
  positions_ = &params->add(prefix + ".positions", {max_seq_len, d_model});
}

Status Embedding::check(const TensorView& ids, const char* h_name, const TensorView& h) const {
  if (ids.dtype() != DType::kI32 || ids.ndim() != 2 || ids.dim(1) < 1 ||
      ids.dim(1) > max_seq_len_) {
    return invalid_argument_error(prefix_, ": ids ", ids.to_string(),
                                  " are not i32[B, S] with 1 <= S <= ", max_seq_len_);
  }
  return check_matrix(prefix_, h_name, h, tokens_->value.dtype(), ids.numel(), d_model_);
}

Status Embedding::forward(const TensorView& ids, const TensorView& h) const {
  MOE_RETURN_IF_ERROR(check(ids, "h", h));
  const int64_t batch = ids.dim(0), seq = ids.dim(1);
  MOE_RETURN_IF_ERROR(kernels::embedding_forward(ids.reshape({batch * seq}), tokens_->value, h)
                          .with_context(prefix_));
  const TensorView pos = positions_->value.view().rows(0, seq);
  for (int64_t b = 0; b < batch; ++b) {
    const TensorView rows = h.rows(b * seq, (b + 1) * seq);
    MOE_RETURN_IF_ERROR(kernels::add(rows, pos, rows));
  }
  return Status::OK();
}

Status Embedding::backward(const TensorView& ids, const TensorView& dh) const {
  MOE_RETURN_IF_ERROR(check(ids, "dh", dh));
  const int64_t batch = ids.dim(0), seq = ids.dim(1);
  MOE_RETURN_IF_ERROR(kernels::embedding_backward(ids.reshape({batch * seq}), dh, tokens_->grad)
                          .with_context(prefix_));
  const TensorView d_pos = positions_->grad.view().rows(0, seq);
  for (int64_t b = 0; b < batch; ++b) {
    MOE_RETURN_IF_ERROR(kernels::axpy(1.0, dh.rows(b * seq, (b + 1) * seq), d_pos));
  }
  return Status::OK();
}

OutputHead::OutputHead(const std::string& prefix, int64_t vocab, int64_t d_model, Parameter* tied,
                       ParameterSet* params)
    : prefix_(prefix), tied_(tied != nullptr) {
  weight_ = tied != nullptr ? tied : &params->add(prefix + ".weight", {vocab, d_model});
}

Status OutputHead::check(const char* name, const TensorView& t, int64_t cols) const {
  if (t.ndim() != 2) {
    return invalid_argument_error(prefix_, ": ", name, " must be 2-D, got ", t.to_string());
  }
  return check_matrix(prefix_, name, t, weight_->value.dtype(), t.dim(0), cols);
}

Status OutputHead::forward(const TensorView& h, const TensorView& logits) const {
  const int64_t vocab = weight_->value.dim(0), d = weight_->value.dim(1);
  MOE_RETURN_IF_ERROR(check("h", h, d));
  MOE_RETURN_IF_ERROR(check_matrix(prefix_, "logits", logits, h.dtype(), h.dim(0), vocab));
  return kernels::gemm(h, false, weight_->value, true, logits);
}

Status OutputHead::backward(const TensorView& h, const TensorView& d_logits,
                            const TensorView& dh) const {
  const int64_t vocab = weight_->value.dim(0), d = weight_->value.dim(1);
  MOE_RETURN_IF_ERROR(check("h", h, d));
  MOE_RETURN_IF_ERROR(check_matrix(prefix_, "d_logits", d_logits, h.dtype(), h.dim(0), vocab));
  MOE_RETURN_IF_ERROR(check_matrix(prefix_, "dh", dh, h.dtype(), h.dim(0), d));
  // dW [V, D] += d_logits^T h; dh = d_logits W.
  MOE_RETURN_IF_ERROR(kernels::gemm(d_logits, true, h, false, weight_->grad, 1.0, 1.0));
  return kernels::gemm(d_logits, false, weight_->value, false, dh);
}

}  // namespace moe
