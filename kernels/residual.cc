#include "kernels/residual.h"

#include <cmath>

#include "kernels/common.h"

namespace moe::kernels {
namespace {

Status check_same(const char* op, const TensorView& ref, const char* name, const TensorView& t,
                  bool required) {
  if (!required && t.numel() == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(check_same_dtype(op, ref, name, t));
  return check_shape(op, name, t, ref.shape());
}

template <typename T>
T at_or_zero(const TensorView& t, int64_t i) {
  return t.numel() > 0 ? t.data<T>()[i] : T(0);
}

}  // namespace

Status residual_forward(const ResidualArgs& a, const TensorView& x, const TensorView& u,
                        const TensorView& p_in, const TensorView& m_in, const TensorView& v_in,
                        const TensorView& out, const TensorView& p_out, const TensorView& m_out,
                        const TensorView& v_out, Stream stream) {
  constexpr const char* kOp = "residual_forward";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  const bool adam = a.form == ResidualForm::kAdam;
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "u", u, true));
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "p_in", p_in, false));
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "out", out, true));
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "p_out", p_out, true));
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "m_in", m_in, false));
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "v_in", v_in, false));
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "m_out", m_out, adam));
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "v_out", v_out, adam));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = x.numel();
    const T* px = x.data<T>();
    const T* pu = u.data<T>();
    T* po = out.data<T>();
    T* pp = p_out.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const double p_prev = at_or_zero<T>(p_in, i);
      switch (a.form) {
        case ResidualForm::kPlain:
          // In double, like the momentum form, so that mu = 0, gamma = 1 is bit-identical.
          po[i] = static_cast<T>(static_cast<double>(px[i]) + static_cast<double>(pu[i]));
          pp[i] = static_cast<T>(p_prev);
          break;
        case ResidualForm::kMomentum: {
          const double p = a.a_state * p_prev + a.a_input * pu[i];
          pp[i] = static_cast<T>(p);
          po[i] = static_cast<T>(px[i] + a.a_out * p);
          break;
        }
        case ResidualForm::kAdam: {
          const double ui = pu[i];
          const double m = a.beta1 * at_or_zero<T>(m_in, i) + (1 - a.beta1) * ui;
          const double v = a.beta2 * at_or_zero<T>(v_in, i) + (1 - a.beta2) * ui * ui;
          const double denom = a.eps_inside_sqrt ? std::sqrt(v + a.eps) : std::sqrt(v) + a.eps;
          m_out.data<T>()[i] = static_cast<T>(m);
          v_out.data<T>()[i] = static_cast<T>(v);
          po[i] = static_cast<T>((1 - a.kappa) * px[i] + a.adam_sign * a.gamma * m / denom);
          pp[i] = static_cast<T>(a.a_state * p_prev + a.a_input * ui);
          break;
        }
      }
    }
  });
}

Status residual_backward(const ResidualArgs& a, const TensorView& d_out,
                         const TensorView& d_p_out, const TensorView& d_m_out,
                         const TensorView& d_v_out, const TensorView& u, const TensorView& m_out,
                         const TensorView& v_out, const TensorView& dx, const TensorView& du,
                         const TensorView& d_p_in, const TensorView& d_m_in,
                         const TensorView& d_v_in, Stream stream) {
  constexpr const char* kOp = "residual_backward";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "d_out", d_out));
  const bool adam = a.form == ResidualForm::kAdam;
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "d_p_out", d_p_out, false));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "d_m_out", d_m_out, false));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "d_v_out", d_v_out, false));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "u", u, true));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "m_out", m_out, adam));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "v_out", v_out, adam));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "dx", dx, true));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "du", du, true));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "d_p_in", d_p_in, true));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "d_m_in", d_m_in, false));
  MOE_RETURN_IF_ERROR(check_same(kOp, d_out, "d_v_in", d_v_in, false));
  return dispatch_host_float(kOp, d_out, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = d_out.numel();
    const T* pd = d_out.data<T>();
    const T* pu = u.data<T>();
    T* pdx = dx.data<T>();
    T* pdu = du.data<T>();
    T* pdp = d_p_in.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      const double g_out = pd[i];
      const double g_p = at_or_zero<T>(d_p_out, i);
      switch (a.form) {
        case ResidualForm::kPlain:
          pdx[i] = static_cast<T>(g_out);
          pdu[i] = static_cast<T>(g_out);
          pdp[i] = static_cast<T>(g_p);
          break;
        case ResidualForm::kMomentum: {
          // p_out feeds out (through a_out) and the later layers (through d_p_out).
          const double g = g_p + a.a_out * g_out;
          pdx[i] = static_cast<T>(g_out);
          pdu[i] = static_cast<T>(a.a_input * g);
          pdp[i] = static_cast<T>(a.a_state * g);
          break;
        }
        case ResidualForm::kAdam: {
          const double ui = pu[i];
          const double m = m_out.data<T>()[i];
          const double v = v_out.data<T>()[i];
          const double sv = std::sqrt(v);
          const double denom = a.eps_inside_sqrt ? std::sqrt(v + a.eps) : sv + a.eps;
          const double c = a.adam_sign * a.gamma * g_out;
          const double g_m = at_or_zero<T>(d_m_out, i) + c / denom;
          // d(1/denom)/dv: inside: -1 / (2 (v + eps)^{3/2}); outside: -1 / (denom^2 2 sqrt(v)).
          double g_v = at_or_zero<T>(d_v_out, i);
          if (a.eps_inside_sqrt) {
            g_v += -c * m / (2.0 * (v + a.eps) * denom);
          } else if (v > 0) {
            g_v += -c * m / (denom * denom * 2.0 * sv);
          }
          pdx[i] = static_cast<T>((1 - a.kappa) * g_out);
          pdu[i] = static_cast<T>((1 - a.beta1) * g_m + 2.0 * (1 - a.beta2) * ui * g_v +
                                  a.a_input * g_p);
          pdp[i] = static_cast<T>(a.a_state * g_p);
          if (d_m_in.numel() > 0) d_m_in.data<T>()[i] = static_cast<T>(a.beta1 * g_m);
          if (d_v_in.numel() > 0) d_v_in.data<T>()[i] = static_cast<T>(a.beta2 * g_v);
          break;
        }
      }
    }
  });
}

Status residual_shift_input(const TensorView& x, const TensorView& p, double a_shift,
                            const TensorView& y, Stream stream) {
  constexpr const char* kOp = "residual_shift_input";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "p", p, true));
  MOE_RETURN_IF_ERROR(check_same(kOp, x, "y", y, true));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    const T* pp = p.data<T>();
    T* py = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = static_cast<T>(px[i] + a_shift * pp[i]);
  });
}

}  // namespace moe::kernels
