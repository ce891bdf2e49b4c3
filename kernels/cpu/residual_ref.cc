#include "kernels/cpu/residual_ref.h"

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/cpu/residual_math.h"

namespace moe::kernels::ref {
namespace {

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

template <typename A, typename F>
void residual_forward(const ResidualArgs& a, int64_t n, const ResidualForwardPtrs<A, F>& p) {
  const bool adam = a.form == ResidualForm::kAdam;
  const A* px = p.x;
  const A* pu = p.u;
  A* po = p.out;
  F* pp = p.p_out;
  const F* ppi = p.p_in;
  const F* pmi = p.m_in;
  const F* pvi = p.v_in;
  F* pmo = p.m_out;
  F* pvo = p.v_out;
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    with_constant_form(a, [&](const ResidualArgs& af) {
      for (int64_t i = begin; i < end; ++i) {
        const ResidualPoint r =
            residual_forward_point(af, static_cast<double>(px[i]), static_cast<double>(pu[i]),
                                   at_or_zero(ppi, i), at_or_zero(pmi, i), at_or_zero(pvi, i));
        po[i] = static_cast<A>(r.out);
        pp[i] = static_cast<F>(r.p);
        if (adam) {
          pmo[i] = static_cast<F>(r.m);
          pvo[i] = static_cast<F>(r.v);
        }
      }
    });
  });
}

template <typename A, typename F>
void residual_backward(const ResidualArgs& a, int64_t n, const ResidualBackwardPtrs<A, F>& p) {
  const A* pd = p.d_out;
  const A* pu = p.u;
  A* pdx = p.dx;
  A* pdu = p.du;
  F* pdp = p.d_p_in;
  const F* pdpo = p.d_p_out;
  const F* pdmo = p.d_m_out;
  const F* pdvo = p.d_v_out;
  const F* pmo = p.m_out;
  const F* pvo = p.v_out;
  F* pdmi = p.d_m_in;
  F* pdvi = p.d_v_in;
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    with_constant_form(a, [&](const ResidualArgs& af) {
      for (int64_t i = begin; i < end; ++i) {
        const ResidualGrads g = residual_backward_point(
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
}

template <typename A, typename F>
void residual_shift_input(const A* px, const F* pp, double a_shift, int64_t n, A* py) {
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      py[i] = static_cast<A>(static_cast<double>(px[i]) + a_shift * static_cast<double>(pp[i]));
    }
  });
}

#define MOE_INSTANTIATE_RESIDUAL(A, F)                                      \
  template void residual_forward<A, F>(const ResidualArgs&, int64_t,        \
                                       const ResidualForwardPtrs<A, F>&);   \
  template void residual_backward<A, F>(const ResidualArgs&, int64_t,       \
                                        const ResidualBackwardPtrs<A, F>&); \
  template void residual_shift_input<A, F>(const A*, const F*, double, int64_t, A*);
MOE_INSTANTIATE_RESIDUAL(float, float)
MOE_INSTANTIATE_RESIDUAL(double, double)
MOE_INSTANTIATE_RESIDUAL(bf16, float)
#undef MOE_INSTANTIATE_RESIDUAL

}  // namespace moe::kernels::ref
