#include "kernels/residual.h"

#include <cmath>

#include "kernels/common.h"

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

template <typename T>
double at_or_zero(const TensorView& t, int64_t i) {
  return t.numel() > 0 ? static_cast<double>(t.data<T>()[i]) : 0.0;
}

}  // namespace

Status residual_forward(Context& ctx, const ResidualArgs& a, const TensorView& x,
                        const TensorView& u, const TensorView& p_in, const TensorView& m_in,
                        const TensorView& v_in, const TensorView& out, const TensorView& p_out,
                        const TensorView& m_out, const TensorView& v_out) {
  constexpr const char* kOp = "residual_forward";
  MOE_KERNEL_ENTRY(ctx, kOp);
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
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const int64_t n = x.numel();
    const A* px = x.data<A>();
    const A* pu = u.data<A>();
    A* po = out.data<A>();
    F* pp = p_out.data<F>();
    for (int64_t i = 0; i < n; ++i) {
      const double p_prev = at_or_zero<F>(p_in, i);
      const double xi = static_cast<double>(px[i]);
      const double ui = static_cast<double>(pu[i]);
      switch (a.form) {
        case ResidualForm::kPlain:
          // In double, like the momentum form, so that mu = 0, gamma = 1 is bit-identical.
          po[i] = static_cast<A>(xi + ui);
          pp[i] = static_cast<F>(p_prev);
          break;
        case ResidualForm::kMomentum: {
          const double p = a.a_state * p_prev + a.a_input * ui;
          pp[i] = static_cast<F>(p);
          po[i] = static_cast<A>(xi + a.a_out * p);
          break;
        }
        case ResidualForm::kAdam: {
          const double m = a.beta1 * at_or_zero<F>(m_in, i) + (1 - a.beta1) * ui;
          const double v = a.beta2 * at_or_zero<F>(v_in, i) + (1 - a.beta2) * ui * ui;
          const double denom = a.eps_inside_sqrt ? std::sqrt(v + a.eps) : std::sqrt(v) + a.eps;
          m_out.data<F>()[i] = static_cast<F>(m);
          v_out.data<F>()[i] = static_cast<F>(v);
          po[i] = static_cast<A>((1 - a.kappa) * xi + a.adam_sign * a.gamma * m / denom);
          pp[i] = static_cast<F>(a.a_state * p_prev + a.a_input * ui);
          break;
        }
      }
    }
  });
}

Status residual_backward(Context& ctx, const ResidualArgs& a, const TensorView& d_out,
                         const TensorView& d_p_out, const TensorView& d_m_out,
                         const TensorView& d_v_out, const TensorView& u, const TensorView& m_out,
                         const TensorView& v_out, const TensorView& dx, const TensorView& du,
                         const TensorView& d_p_in, const TensorView& d_m_in,
                         const TensorView& d_v_in) {
  constexpr const char* kOp = "residual_backward";
  MOE_KERNEL_ENTRY(ctx, kOp);
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
  return dispatch_act(kOp, d_out, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const int64_t n = d_out.numel();
    const A* pd = d_out.data<A>();
    const A* pu = u.data<A>();
    A* pdx = dx.data<A>();
    A* pdu = du.data<A>();
    F* pdp = d_p_in.data<F>();
    for (int64_t i = 0; i < n; ++i) {
      const double g_out = static_cast<double>(pd[i]);
      const double g_p = at_or_zero<F>(d_p_out, i);
      switch (a.form) {
        case ResidualForm::kPlain:
          pdx[i] = static_cast<A>(g_out);
          pdu[i] = static_cast<A>(g_out);
          pdp[i] = static_cast<F>(g_p);
          break;
        case ResidualForm::kMomentum: {
          // p_out feeds out (through a_out) and the later layers (through d_p_out).
          const double g = g_p + a.a_out * g_out;
          pdx[i] = static_cast<A>(g_out);
          pdu[i] = static_cast<A>(a.a_input * g);
          pdp[i] = static_cast<F>(a.a_state * g);
          break;
        }
        case ResidualForm::kAdam: {
          const double ui = static_cast<double>(pu[i]);
          const double m = static_cast<double>(m_out.data<F>()[i]);
          const double v = static_cast<double>(v_out.data<F>()[i]);
          const double sv = std::sqrt(v);
          const double denom = a.eps_inside_sqrt ? std::sqrt(v + a.eps) : sv + a.eps;
          const double c = a.adam_sign * a.gamma * g_out;
          const double g_m = at_or_zero<F>(d_m_out, i) + c / denom;
          // d(1/denom)/dv: inside: -1 / (2 (v + eps)^{3/2}); outside: -1 / (denom^2 2 sqrt(v)).
          double g_v = at_or_zero<F>(d_v_out, i);
          if (a.eps_inside_sqrt) {
            g_v += -c * m / (2.0 * (v + a.eps) * denom);
          } else if (v > 0) {
            g_v += -c * m / (denom * denom * 2.0 * sv);
          }
          pdx[i] = static_cast<A>((1 - a.kappa) * g_out);
          pdu[i] = static_cast<A>((1 - a.beta1) * g_m + 2.0 * (1 - a.beta2) * ui * g_v +
                                  a.a_input * g_p);
          pdp[i] = static_cast<F>(a.a_state * g_p);
          if (d_m_in.numel() > 0) d_m_in.data<F>()[i] = static_cast<F>(a.beta1 * g_m);
          if (d_v_in.numel() > 0) d_v_in.data<F>()[i] = static_cast<F>(a.beta2 * g_v);
          break;
        }
      }
    }
  });
}

Status residual_shift_input(Context& ctx, const TensorView& x, const TensorView& p,
                            double a_shift, const TensorView& y) {
  constexpr const char* kOp = "residual_shift_input";
  MOE_KERNEL_ENTRY(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "p", p, compute_dtype(x.dtype()), true));
  MOE_RETURN_IF_ERROR(check_role(ctx, kOp, x, "y", y, x.dtype(), true));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const A* px = x.data<A>();
    const F* pp = p.data<F>();
    A* py = y.data<A>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      py[i] = static_cast<A>(static_cast<double>(px[i]) + a_shift * static_cast<double>(pp[i]));
    }
  });
}

}  // namespace moe::kernels
