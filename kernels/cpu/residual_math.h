// The residual dynamics of one element (kernels/residual.h), in double, shared by the CPU loop
// (kernels/cpu/residual_ref.cc) and the CUDA kernel (kernels/cuda/residual.cu) so that both compute
// the same expressions. Pure functions of their arguments; no memory access.
#pragma once

#include <cmath>

#include "base/dtype.h"  // MOE_HOST_DEVICE
#include "kernels/residual.h"

namespace moe::kernels::ref {

struct ResidualPoint {
  double out = 0, p = 0, m = 0, v = 0;  // m, v: kAdam only
};

// x, u: this element of the input and the expert output; p_prev, m_prev, v_prev: the incoming
// states (0 when absent).
MOE_HOST_DEVICE inline ResidualPoint residual_forward_point(const ResidualArgs& a, double x,
                                                            double u, double p_prev, double m_prev,
                                                            double v_prev) {
  ResidualPoint r;
  switch (a.form) {
    case ResidualForm::kPlain:
      // In double, like the momentum form, so that mu = 0, gamma = 1 is bit-identical.
      r.out = x + u;
      r.p = p_prev;
      break;
    case ResidualForm::kMomentum:
      r.p = a.a_state * p_prev + a.a_input * u;
      r.out = x + a.a_out * r.p;
      break;
    case ResidualForm::kAdam: {
      r.m = a.beta1 * m_prev + (1 - a.beta1) * u;
      r.v = a.beta2 * v_prev + (1 - a.beta2) * u * u;
      const double denom = a.eps_inside_sqrt ? sqrt(r.v + a.eps) : sqrt(r.v) + a.eps;
      r.out = (1 - a.kappa) * x + a.adam_sign * a.gamma * r.m / denom;
      r.p = a.a_state * p_prev + a.a_input * u;
      break;
    }
  }
  return r;
}

struct ResidualGrads {
  double dx = 0, du = 0, dp = 0, dm = 0, dv = 0;  // dm, dv: kAdam only
};

// g_out, g_p, g_m, g_v: the gradients arriving at out and at the outgoing states (0 when
// absent); u, m, v: the forward's expert output and outgoing Adam moments.
MOE_HOST_DEVICE inline ResidualGrads residual_backward_point(const ResidualArgs& a, double g_out,
                                                             double g_p, double g_m_out,
                                                             double g_v_out, double u, double m,
                                                             double v) {
  ResidualGrads g;
  switch (a.form) {
    case ResidualForm::kPlain:
      g.dx = g_out;
      g.du = g_out;
      g.dp = g_p;
      break;
    case ResidualForm::kMomentum: {
      // p_out feeds out (through a_out) and the later layers (through d_p_out).
      const double gp = g_p + a.a_out * g_out;
      g.dx = g_out;
      g.du = a.a_input * gp;
      g.dp = a.a_state * gp;
      break;
    }
    case ResidualForm::kAdam: {
      const double sv = sqrt(v);
      const double denom = a.eps_inside_sqrt ? sqrt(v + a.eps) : sv + a.eps;
      const double c = a.adam_sign * a.gamma * g_out;
      const double gm = g_m_out + c / denom;
      // d(1/denom)/dv: inside: -1 / (2 (v + eps)^{3/2}); outside: -1 / (denom^2 2 sqrt(v)); the
      // subgradient 0 at v = 0 (a dropped token).
      double gv = g_v_out;
      if (a.eps_inside_sqrt) {
        gv += -c * m / (2.0 * (v + a.eps) * denom);
      } else if (v > 0) {
        gv += -c * m / (denom * denom * 2.0 * sv);
      }
      g.dx = (1 - a.kappa) * g_out;
      g.du = (1 - a.beta1) * gm + 2.0 * (1 - a.beta2) * u * gv + a.a_input * g_p;
      g.dp = a.a_state * g_p;
      g.dm = a.beta1 * gm;
      g.dv = a.beta2 * gv;
      break;
    }
  }
  return g;
}

}  // namespace moe::kernels::ref
