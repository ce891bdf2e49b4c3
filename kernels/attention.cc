#include "kernels/attention.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "base/logging.h"
#include "kernels/common.h"
#include "kernels/cpu/attention_ref.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/flash_attention.h"

namespace moe::kernels {
namespace {

// Validates args and qkv [B*S, 3D] with D divisible by H; sets *d_model.
Status check_args(const Context& ctx, const char* op, const AttentionArgs& a, const TensorView& qkv,
                  int64_t* d_model) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, "qkv", qkv));
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

Status check_act_shape(const char* op, const TensorView& qkv, const char* name, const TensorView& t,
                       const Shape& shape) {
  MOE_RETURN_IF_ERROR(check_same_dtype(op, qkv, name, t));
  return check_shape(op, name, t, shape);
}

}  // namespace

CudaAttention cuda_attention(DType act, int64_t head_dim) {
  const char* mode = std::getenv("MOMOE_ATTENTION");
  const std::string m = mode == nullptr ? "" : mode;
  if (!m.empty() && m != "gemm" && m != "gemm-bf16" && m != "fused") {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      log_warning("MOMOE_ATTENTION=", m, " is not one of gemm, gemm-bf16, fused: attention runs ",
                  "on the default path");
    }
  }
  if (m == "gemm" || act != DType::kBF16) return CudaAttention::kGemm;
  if (m != "gemm-bf16" && head_dim >= 1 && head_dim <= cuda::kFusedAttentionMaxHeadDim) {
    return CudaAttention::kFused;
  }
  return CudaAttention::kGemmBf16;
}

const char* attention_path(const Context& ctx, DType act, int64_t head_dim) {
  if (ctx.device().is_host()) return "cpu";
  switch (cuda_attention(act, head_dim)) {
    case CudaAttention::kGemmBf16:
      return "gemm-bf16";
    case CudaAttention::kFused:
      return "fused";
    case CudaAttention::kGemm:
      break;
  }
  return "gemm";
}

Status attention_forward(Context& ctx, const AttentionArgs& a, const TensorView& qkv,
                         const TensorView& out, const TensorView& lse) {
  constexpr const char* kOp = "attention_forward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  int64_t D = 0;
  MOE_RETURN_IF_ERROR(check_args(ctx, kOp, a, qkv, &D));
  const int64_t S = a.seq_len, H = a.heads;
  MOE_RETURN_IF_ERROR(check_act_shape(kOp, qkv, "out", out, Shape{a.batch * S, D}));
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "lse", lse));
  MOE_RETURN_IF_ERROR(check_compute(kOp, "lse", lse, qkv.dtype(), Shape{a.batch, H, S}));
  MOE_ON_CUDA(ctx, cuda::attention_forward(ctx, a, qkv, out, lse));
  return dispatch_act(kOp, qkv, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::attention_forward<A, F>(a, D / H, qkv.data<A>(), out.data<A>(), lse.data<F>());
  });
}

Status attention_backward(Context& ctx, const AttentionArgs& a, const TensorView& d_out,
                          const TensorView& qkv, const TensorView& out, const TensorView& lse,
                          const TensorView& d_qkv) {
  constexpr const char* kOp = "attention_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  int64_t D = 0;
  MOE_RETURN_IF_ERROR(check_args(ctx, kOp, a, qkv, &D));
  const int64_t S = a.seq_len, H = a.heads;
  MOE_RETURN_IF_ERROR(check_act_shape(kOp, qkv, "d_out", d_out, Shape{a.batch * S, D}));
  MOE_RETURN_IF_ERROR(check_act_shape(kOp, qkv, "out", out, Shape{a.batch * S, D}));
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "lse", lse));
  MOE_RETURN_IF_ERROR(check_compute(kOp, "lse", lse, qkv.dtype(), Shape{a.batch, H, S}));
  MOE_RETURN_IF_ERROR(check_act_shape(kOp, qkv, "d_qkv", d_qkv, qkv.shape()));
  MOE_ON_CUDA(ctx, cuda::attention_backward(ctx, a, d_out, qkv, out, lse, d_qkv));
  return dispatch_act(kOp, qkv, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::attention_backward<A, F>(a, D / H, d_out.data<A>(), qkv.data<A>(), lse.data<F>(),
                                  d_qkv.data<A>());
  });
}

}  // namespace moe::kernels
