#include "kernels/rope.h"

#include <cmath>

#include "kernels/common.h"
#include "kernels/cpu/rope_ref.h"
#include "kernels/cuda/rope.h"

namespace moe::kernels {
namespace {

// Validates args, in [B*S, 3D] (D divisible by H, an even head width) and out like in; sets
// *head_dim.
Status check_args(const Context& ctx, const char* op, const RopeArgs& a, const char* in_name,
                  const TensorView& in, const char* out_name, const TensorView& out,
                  int64_t* head_dim) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, in_name, in));
  if (a.batch < 1 || a.seq_len < 1 || a.heads < 1) {
    return invalid_argument_error(op, ": batch, seq_len and heads must be >= 1, got ", a.batch,
                                  ", ", a.seq_len, ", ", a.heads);
  }
  if (!(a.base > 0) || !std::isfinite(a.base)) {
    return invalid_argument_error(op, ": base = ", a.base, " is outside (0, inf)");
  }
  if (in.ndim() != 2 || in.dim(0) != a.batch * a.seq_len || in.dim(1) == 0 ||
      in.dim(1) % (3 * a.heads) != 0) {
    return invalid_argument_error(op, ": ", in_name, " must be [B*S, 3*D] = [", a.batch * a.seq_len,
                                  ", 3*D] with D divisible by H = ", a.heads, ", got ",
                                  in.to_string());
  }
  *head_dim = in.dim(1) / (3 * a.heads);
  if (*head_dim % 2 != 0) {
    return invalid_argument_error(op, ": the head width D / H = ", *head_dim,
                                  " is odd; RoPE pairs (i, i + Dh/2) need it even");
  }
  return check_like(op, in, out_name, out);
}

Status rope(Context& ctx, const char* op, const RopeArgs& a, bool transpose, const char* in_name,
            const TensorView& in, const char* out_name, const TensorView& out) {
  MOE_KERNEL_ENTRY_CUDA(ctx, op);
  int64_t head_dim = 0;
  MOE_RETURN_IF_ERROR(check_args(ctx, op, a, in_name, in, out_name, out, &head_dim));
  MOE_ON_CUDA(ctx, cuda::rope(ctx, a, transpose, in, out));
  return dispatch_act(op, in, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::rope_rotate<A, F>(a, head_dim, transpose, in.data<A>(), out.data<A>());
  });
}

}  // namespace

Status rope_forward(Context& ctx, const RopeArgs& args, const TensorView& qkv,
                    const TensorView& out) {
  return rope(ctx, "rope_forward", args, false, "qkv", qkv, "out", out);
}

Status rope_backward(Context& ctx, const RopeArgs& args, const TensorView& d_out,
                     const TensorView& d_qkv) {
  return rope(ctx, "rope_backward", args, true, "d_out", d_out, "d_qkv", d_qkv);
}

}  // namespace moe::kernels
