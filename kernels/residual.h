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

#include "base/context.h"
#include "base/tensor.h"

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

// The state a residual step reads or writes: the momentum state p (or the reference code's
// buffer m) and the Adam moments m, v; or their gradients. An empty view reads as zero (inputs)
// or is not written (outputs).
struct ResidualState {
  TensorView p, m, v;
};

// What residual_backward writes: the gradients of x and u, and of the incoming state.
struct ResidualBackwardOut {
  TensorView dx, du;
  ResidualState d_in;
};

// Dtypes: x, u and out are act (f32, f64, bf16); the states p, m and v are full precision
// F = compute_dtype(act) always, and arithmetic is in double. All views are [T, D].
// in.m, in.v, state_out.m, state_out.v are used by kAdam only (empty otherwise); in's views may be
// empty (zero: before the first MoE layer). Overwrites out, state_out.p (and state_out.m, .v).
Status residual_forward(Context& ctx, const ResidualArgs& args, const TensorView& x,
                        const TensorView& u, const ResidualState& in, const TensorView& out,
                        const ResidualState& state_out);

// Gradients of the forward above. d_out, u, grads.dx, grads.du are act; the state gradients F.
// d_state_out's views may be empty (zero: no later layer reads the state). Needs u and
// state_out.m, .v from the forward (Adam; state_out.p is not read). Overwrites grads.dx, .du,
// .d_in.p (and .d_in.m, .d_in.v when given, kAdam).
// Where v_out == 0 the derivative of sqrt is taken as 0 (the subgradient at u = 0), so a dropped
// token yields finite gradients.
Status residual_backward(Context& ctx, const ResidualArgs& args, const TensorView& d_out,
                         const ResidualState& d_state_out, const TensorView& u,
                         const ResidualState& state_out, const ResidualBackwardOut& grads);

// y = x + a_shift * p (the robust variant's router and expert input). x, y act; p F.
// Overwrites y. (Its backward adds a_shift * dL/dy to dL/dp: kernels::axpy.)
Status residual_shift_input(Context& ctx, const TensorView& x, const TensorView& p, double a_shift,
                            const TensorView& y);

}  // namespace moe::kernels
