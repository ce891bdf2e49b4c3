#include "kernels/residual.h"

#include <cmath>

#include "base/thread_pool.h"
#include "kernels/common.h"
#include "kernels/cpu/residual_math.h"
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

// An optional input's element i (0 when absent).
template <typename T>
double at_or_zero(const T* p, int64_t i) {
  return p != nullptr ? static_cast<double>(p[i]) : 0.0;
}

// Calls f(args) with a copy of a whose form is a compile-time constant in each branch, so the
// per-element switch in residual_math.h folds away and the loops vectorise.
template <typename Fn>
void with_constant_form(const ResidualArgs& a, Fn&& f) {
  ResidualArgs c = a;
  switch (a.form) {
    case ResidualForm::kPlain:
      c.form = ResidualForm::kPlain;
      f(c);
      return;
    case ResidualForm::kMomentum:
      c.form = ResidualForm::kMomentum;
      f(c);
      return;
    case ResidualForm::kAdam:
      c.form = ResidualForm::kAdam;
      f(c);
      return;
  }
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
    const int64_t n = x.numel();
    const A* px = x.data<A>();
    const A* pu = u.data<A>();
    A* po = out.data<A>();
    F* pp = p_out.data<F>();
    const F* ppi = data_or_null<F>(p_in);
    const F* pmi = adam ? data_or_null<F>(m_in) : nullptr;
    const F* pvi = adam ? data_or_null<F>(v_in) : nullptr;
    F* pmo = adam ? m_out.data<F>() : nullptr;
    F* pvo = adam ? v_out.data<F>() : nullptr;
    parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
      with_constant_form(a, [&](const ResidualArgs& af) {
        for (int64_t i = begin; i < end; ++i) {
          const ref::ResidualPoint r = ref::residual_forward_point(
              af, static_cast<double>(px[i]), static_cast<double>(pu[i]), at_or_zero(ppi, i),
              at_or_zero(pmi, i), at_or_zero(pvi, i));
          po[i] = static_cast<A>(r.out);
          pp[i] = static_cast<F>(r.p);
          if (adam) {
            pmo[i] = static_cast<F>(r.m);
            pvo[i] = static_cast<F>(r.v);
          }
        }
      });
    });
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
    const int64_t n = d_out.numel();
    const A* pd = d_out.data<A>();
    const A* pu = u.data<A>();
    A* pdx = dx.data<A>();
    A* pdu = du.data<A>();
    F* pdp = d_p_in.data<F>();
    const F* pdpo = data_or_null<F>(d_p_out);
    const F* pdmo = adam ? data_or_null<F>(d_m_out) : nullptr;
    const F* pdvo = adam ? data_or_null<F>(d_v_out) : nullptr;
    const F* pmo = adam ? m_out.data<F>() : nullptr;
    const F* pvo = adam ? v_out.data<F>() : nullptr;
    F* pdmi = adam ? data_or_null<F>(d_m_in) : nullptr;
    F* pdvi = adam ? data_or_null<F>(d_v_in) : nullptr;
    parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
      with_constant_form(a, [&](const ResidualArgs& af) {
        for (int64_t i = begin; i < end; ++i) {
          const ref::ResidualGrads g = ref::residual_backward_point(
              af, static_cast<double>(pd[i]), at_or_zero(pdpo, i), at_or_zero(pdmo, i),
              at_or_zero(pdvo, i), static_cast<double>(pu[i]), at_or_zero(pmo, i),
              at_or_zero(pvo, i));
          pdx[i] = static_cast<A>(g.dx);
          pdu[i] = static_cast<A>(g.du);
          pdp[i] = static_cast<F>(g.dp);
          if (pdmi != nullptr) pdmi[i] = static_cast<F>(g.dm);
          if (pdvi != nullptr) pdvi[i] = static_cast<F>(g.dv);
        }
      });
    });
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
    const A* px = x.data<A>();
    const F* pp = p.data<F>();
    A* py = y.data<A>();
    parallel_for(x.numel(), kElementGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        py[i] = static_cast<A>(static_cast<double>(px[i]) + a_shift * static_cast<double>(pp[i]));
      }
    });
  });
}

}  // namespace moe::kernels
