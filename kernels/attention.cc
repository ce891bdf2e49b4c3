#include "kernels/attention.h"

#include "kernels/common.h"
#include "kernels/reference/attention_ref.h"

namespace moe::kernels {
namespace {

// Validates args and qkv [B*S, 3D] with D divisible by H; sets *d_model.
Status check_args(const char* op, const AttentionArgs& a, const TensorView& qkv, int64_t* d_model) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "qkv", qkv));
  if (a.batch < 1 || a.seq_len < 1 || a.heads < 1) {
    return invalid_argument_error(op, ": batch, seq_len and heads must be >= 1, got ", a.batch,
                                  ", ", a.seq_len, ", ", a.heads);
  }
  if (!(a.dropout >= 0.f && a.dropout < 1.f)) {
    return invalid_argument_error(op, ": dropout = ", a.dropout, " is outside [0, 1)");
  }
  if (qkv.ndim() != 2 || qkv.dim(0) != a.batch * a.seq_len || qkv.dim(1) == 0 ||
      qkv.dim(1) % (3 * a.heads) != 0) {
    return invalid_argument_error(op, ": qkv must be [B*S, 3*D] = [", a.batch * a.seq_len,
                                  ", 3*D] with D divisible by H = ", a.heads, ", got ",
                                  qkv.to_string());
  }
  *d_model = qkv.dim(1) / 3;
  return Status::OK();
}

Status check_like(const char* op, const TensorView& qkv, const char* name, const TensorView& t,
                  const Shape& shape) {
  MOE_RETURN_IF_ERROR(check_same_dtype(op, qkv, name, t));
  return check_shape(op, name, t, shape);
}

}  // namespace

Status attention_forward(const AttentionArgs& a, const TensorView& qkv, const TensorView& out,
                         const TensorView& probs, Stream stream) {
  constexpr const char* kOp = "attention_forward";
  int64_t D = 0;
  MOE_RETURN_IF_ERROR(check_args(kOp, a, qkv, &D));
  const int64_t S = a.seq_len, H = a.heads;
  MOE_RETURN_IF_ERROR(check_like(kOp, qkv, "out", out, Shape{a.batch * S, D}));
  MOE_RETURN_IF_ERROR(check_like(kOp, qkv, "probs", probs, Shape{a.batch, H, S, S}));
  return dispatch_host_float(kOp, qkv, [&](auto tag) {
    using T = decltype(tag);
    ref::attention_forward<T>(a, D / H, qkv.data<T>(), out.data<T>(), probs.data<T>());
  });
}

Status attention_backward(const AttentionArgs& a, const TensorView& d_out, const TensorView& qkv,
                          const TensorView& probs, const TensorView& d_qkv, Stream stream) {
  constexpr const char* kOp = "attention_backward";
  int64_t D = 0;
  MOE_RETURN_IF_ERROR(check_args(kOp, a, qkv, &D));
  const int64_t S = a.seq_len, H = a.heads;
  MOE_RETURN_IF_ERROR(check_like(kOp, qkv, "d_out", d_out, Shape{a.batch * S, D}));
  MOE_RETURN_IF_ERROR(check_like(kOp, qkv, "probs", probs, Shape{a.batch, H, S, S}));
  MOE_RETURN_IF_ERROR(check_like(kOp, qkv, "d_qkv", d_qkv, qkv.shape()));
  return dispatch_host_float(kOp, qkv, [&](auto tag) {
    using T = decltype(tag);
    ref::attention_backward<T>(a, D / H, d_out.data<T>(), qkv.data<T>(), probs.data<T>(),
                               d_qkv.data<T>());
  });
}

}  // namespace moe::kernels
