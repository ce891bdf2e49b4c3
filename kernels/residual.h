// Residual dynamics of the MoE layer, applied after the combine on the token's home rank
// (spec/momentum-smoe.md sections 2-4, 9). Elementwise over [T, D]; state tensors are the
// momentum state p (or the reference code's buffer m) and the Adam moments.
//
// With the state coefficients below, every variant is one of three forms:
//   kPlain:     out = x + u;                          p_out = p_in
//   kMomentum:  p_out = a_state p_in + a_input u;     out = x + a_out p_out
//               (heavy ball and robust; the paper's convention has a_input = 1, a_out = gamma,
//                the reference code's a_input = gamma, a_out = -1; a_state = mu)
//   kAdam:      m_out = beta1 m_in + (1 - beta1) u;  v_out = beta2 v_in + (1 - beta2) u^2
//               out = (1 - kappa) x + adam_sign gamma m_out / denom(v_out)
//               denom = sqrt(v) + eps (outside) or sqrt(v + eps) (inside)
//               p_out = a_state p_in + a_input u     (heavy-ball state handed to later layers)
// The robust variant's input shift y = x + a_shift p_in is applied before routing
// (residual_shift_input) and its gradient is added to d_p_in by the caller.
#pragma once

#include "core/base/context.h"
#include "core/base/tensor.h"

namespace moe::kernels {

enum class ResidualForm { kPlain, kMomentum, kAdam };

struct ResidualArgs {
  ResidualForm form = ResidualForm::kPlain;
  double a_state = 0;  // mu
  double a_input = 1;
  double a_out = 1;
  // Adam.
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, kappa = 0, gamma = 1, adam_sign = 1;
  bool eps_inside_sqrt = false;
};

// Dtypes: x, u and out are act (f32, f64, bf16); the states p, m and v are full precision
// F = compute_dtype(act) always, and arithmetic is in double. All views are [T, D].
// m_in/v_in/m_out/v_out are used by kAdam only (empty otherwise); p_in, m_in, v_in may be empty
// (zero: before the first MoE layer). Overwrites out, p_out (and m_out, v_out).
Status residual_forward(Context& ctx, const ResidualArgs& args, const TensorView& x,
                        const TensorView& u, const TensorView& p_in, const TensorView& m_in,
                        const TensorView& v_in, const TensorView& out, const TensorView& p_out,
                        const TensorView& m_out, const TensorView& v_out);

// Gradients of the forward above. d_out, u, dx, du are act; the state gradients F.
// d_p_out/d_m_out/d_v_out may be empty (zero: no later layer reads the state). Needs u, m_out and
// v_out from the forward (Adam). Overwrites dx, du, d_p_in (and d_m_in, d_v_in when given, kAdam).
// Where v_out == 0 the derivative of sqrt is taken as 0 (the subgradient at u = 0), so a dropped
// token yields finite gradients.
Status residual_backward(Context& ctx, const ResidualArgs& args, const TensorView& d_out,
                         const TensorView& d_p_out, const TensorView& d_m_out,
                         const TensorView& d_v_out, const TensorView& u, const TensorView& m_out,
                         const TensorView& v_out, const TensorView& dx, const TensorView& du,
                         const TensorView& d_p_in, const TensorView& d_m_in,
                         const TensorView& d_v_in);

// y = x + a_shift * p (the robust variant's router and expert input). x, y act; p F.
// Overwrites y. (Its backward adds a_shift * dL/dy to dL/dp: kernels::axpy.)
Status residual_shift_input(Context& ctx, const TensorView& x, const TensorView& p, double a_shift,
                            const TensorView& y);

}  // namespace moe::kernels
