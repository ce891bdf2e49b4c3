#include "core/layers/dense_ffn.h"

#include "core/layers/expert_ffn.h"
#include "kernels/gemm.h"

namespace moe {

DenseFfn::DenseFfn(const std::string& prefix, int64_t d_model, int64_t d_ff,
                   ExpertActivation activation, double dropout, ParameterSet* params)
    : prefix_(prefix),
      activation_(to_kernel_activation(activation)),
      dropout_(dropout),
      d_model_(d_model),
      d_ff_(d_ff) {
  w1_ = &params->add(prefix + ".w1", {d_model, d_ff});
  b1_ = &params->add(prefix + ".b1", {d_ff}, ParamKind::kDense, false);
  w2_ = &params->add(prefix + ".w2", {d_ff, d_model});
  b2_ = &params->add(prefix + ".b2", {d_model}, ParamKind::kDense, false);
}

Status DenseFfn::check(const char* name, const TensorView& t, int64_t rows) const {
  const DType dtype = w1_->value.dtype();
  if (t.dtype() != dtype || t.shape() != Shape{rows, d_model_}) {
    return invalid_argument_error(prefix_, ": ", name, " is ", t.to_string(), ", expected ",
                                  dtype_name(dtype), Shape{rows, d_model_}.to_string());
  }
  return Status::OK();
}

Status DenseFfn::forward(const TensorView& x, int64_t token_offset, bool training, CounterRng rng,
                         const TensorView& y, Saved* saved) const {
  const int64_t n = x.ndim() == 2 ? x.dim(0) : 0;
  MOE_RETURN_IF_ERROR(check("x", x, n));
  MOE_RETURN_IF_ERROR(check("y", y, n));
  const std::vector<int64_t> all = {0, n};
  saved->x = Tensor::copy_of(x);
  saved->h_pre = Tensor::empty({n, d_ff_}, x.dtype());
  saved->h = Tensor::empty({n, d_ff_}, x.dtype());
  saved->dropout = training ? static_cast<float>(dropout_) : 0.f;
  saved->rng = rng;
  MOE_RETURN_IF_ERROR(kernels::gemm(x, false, w1_->value, false, saved->h_pre));
  MOE_RETURN_IF_ERROR(
      kernels::add_bias_grouped(saved->h_pre, b1_->value.view().reshape({1, d_ff_}), all));
  MOE_RETURN_IF_ERROR(kernels::activation_forward(activation_, saved->h_pre, saved->h));
  if (saved->dropout > 0) {
    saved->keys = Tensor::empty({n}, DType::kI64);
    for (int64_t t = 0; t < n; ++t) saved->keys.data<int64_t>()[t] = token_offset + t;
    MOE_RETURN_IF_ERROR(
        kernels::dropout_forward(saved->h, saved->keys, rng, saved->dropout, saved->h)
            .with_context(prefix_));
  }
  MOE_RETURN_IF_ERROR(kernels::gemm(saved->h, false, w2_->value, false, y));
  return kernels::add_bias_grouped(y, b2_->value.view().reshape({1, d_model_}), all);
}

Status DenseFfn::backward(const TensorView& dy, const Saved& saved, const TensorView& dx) const {
  const int64_t n = saved.x.dim(0);
  MOE_RETURN_IF_ERROR(check("dy", dy, n));
  MOE_RETURN_IF_ERROR(check("dx", dx, n));
  const std::vector<int64_t> all = {0, n};
  // Second projection: dW2 += h^T dy; db2 += sum dy; dh = dy W2^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(saved.h, true, dy, false, w2_->grad, 1.0, 1.0));
  MOE_RETURN_IF_ERROR(kernels::bias_grad_grouped(dy, b2_->grad.view().reshape({1, d_model_}), all));
  Tensor dh = Tensor::empty({n, d_ff_}, dy.dtype());
  MOE_RETURN_IF_ERROR(kernels::gemm(dy, false, w2_->value, true, dh));
  if (saved.dropout > 0) {
    MOE_RETURN_IF_ERROR(kernels::dropout_backward(dh, saved.keys, saved.rng, saved.dropout, dh));
  }
  MOE_RETURN_IF_ERROR(kernels::activation_backward(activation_, saved.h_pre, dh, dh));
  // First projection: dW1 += x^T dh; db1 += sum dh; dx = dh W1^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(saved.x, true, dh, false, w1_->grad, 1.0, 1.0));
  MOE_RETURN_IF_ERROR(kernels::bias_grad_grouped(dh, b1_->grad.view().reshape({1, d_ff_}), all));
  return kernels::gemm(dh, false, w1_->value, true, dx);
}

}  // namespace moe
