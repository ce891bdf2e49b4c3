#include "kernels/residual.h"

#include "kernels/common.h"
#include "kernels/cpu/residual_ref.h"
#include "kernels/cuda/residual.h"

namespace moe::kernels {
namespace {

// t has `like`'s shape and dtype `dtype` (optional when !required: may be empty).
Status check_role(const Context& ctx, const char* op, const TensorView& like, const char* name,
                  const TensorView& t, DType dtype, bool required) {
  if (!required && t.numel() == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(check_device(ctx, op, name, t));
  MOE_RETURN_IF_ERROR(check_dtype(op, name, t, dtype));
  return check_shape(op, name, t, like.shape());
}

}  // namespace

Status residual_forward(Context& ctx, const ResidualArgs& a, const TensorView& x,
                        const TensorView& u, const ResidualState& in, const TensorView& out,
                        const ResidualState& state_out) {
  const TensorView &p_in = in.p, &m_in = in.m, &v_in = in.v;
  const TensorView &p_out = state_out.p, &m_out = state_out.m, &v_out = state_out.v;
  constexpr const char* kOp = "residual_forward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  const DType act = x.dtype(), f = compute_dtype(act);
  const bool adam = a.form == ResidualForm::kAdam;
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "u", u, act, true));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "out", out, act, true));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "p_in", p_in, f, false));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "p_out", p_out, f, true));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "m_in", m_in, f, false));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "v_in", v_in, f, false));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "m_out", m_out, f, adam));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "v_out", v_out, f, adam));
  MOE_ON_CUDA(ctx,
              cuda::residual_forward(ctx, a, x, u, {p_in, m_in, v_in}, out, {p_out, m_out, v_out}));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::ResidualForwardPtrs<A, F> p;
    p.x = x.data<A>();
    p.u = u.data<A>();
    p.out = out.data<A>();
    p.p_out = p_out.data<F>();
    p.p_in = data_or_null<F>(p_in);
    p.m_in = adam ? data_or_null<F>(m_in) : nullptr;
    p.v_in = adam ? data_or_null<F>(v_in) : nullptr;
    p.m_out = adam ? m_out.data<F>() : nullptr;
    p.v_out = adam ? v_out.data<F>() : nullptr;
    ref::residual_forward<A, F>(a, x.numel(), p);
  });
}

Status residual_backward(Context& ctx, const ResidualArgs& a, const TensorView& d_out,
                         const ResidualState& d_state_out, const TensorView& u,
                         const ResidualState& state_out, const ResidualBackwardOut& grads) {
  const TensorView &d_p_out = d_state_out.p, &d_m_out = d_state_out.m, &d_v_out = d_state_out.v;
  const TensorView &m_out = state_out.m, &v_out = state_out.v;
  const TensorView &dx = grads.dx, &du = grads.du;
  const TensorView &d_p_in = grads.d_in.p, &d_m_in = grads.d_in.m, &d_v_in = grads.d_in.v;
  constexpr const char* kOp = "residual_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "d_out", d_out));
  const DType act = d_out.dtype(), f = compute_dtype(act);
  const bool adam = a.form == ResidualForm::kAdam;
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "d_p_out", d_p_out, f, false));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "d_m_out", d_m_out, f, false));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "d_v_out", d_v_out, f, false));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "u", u, act, true));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "m_out", m_out, f, adam));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "v_out", v_out, f, adam));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "dx", dx, act, true));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "du", du, act, true));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "d_p_in", d_p_in, f, true));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "d_m_in", d_m_in, f, false));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, d_out, "d_v_in", d_v_in, f, false));
  MOE_ON_CUDA(ctx, cuda::residual_backward(ctx, a, d_out, {d_p_out, d_m_out, d_v_out}, u,
                                           {{}, m_out, v_out}, {dx, du, {d_p_in, d_m_in, d_v_in}}));
  return dispatch_act(kOp, d_out, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::ResidualBackwardPtrs<A, F> p;
    p.d_out = d_out.data<A>();
    p.u = u.data<A>();
    p.dx = dx.data<A>();
    p.du = du.data<A>();
    p.d_p_in = d_p_in.data<F>();
    p.d_p_out = data_or_null<F>(d_p_out);
    p.d_m_out = adam ? data_or_null<F>(d_m_out) : nullptr;
    p.d_v_out = adam ? data_or_null<F>(d_v_out) : nullptr;
    p.m_out = adam ? m_out.data<F>() : nullptr;
    p.v_out = adam ? v_out.data<F>() : nullptr;
    p.d_m_in = adam ? data_or_null<F>(d_m_in) : nullptr;
    p.d_v_in = adam ? data_or_null<F>(d_v_in) : nullptr;
    ref::residual_backward<A, F>(a, d_out.numel(), p);
  });
}

Status residual_shift_input(Context& ctx, const TensorView& x, const TensorView& p, double a_shift,
                            const TensorView& y) {
  constexpr const char* kOp = "residual_shift_input";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "p", p, compute_dtype(x.dtype()), true));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "y", y, x.dtype(), true));
  MOE_ON_CUDA(ctx, cuda::residual_shift_input(ctx, x, p, a_shift, y));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::residual_shift_input<A, F>(x.data<A>(), p.data<F>(), a_shift, x.numel(), y.data<A>());
  });
}

}  // namespace moe::kernels
