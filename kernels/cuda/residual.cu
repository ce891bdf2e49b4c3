// The residual dynamics on the GPU (plain, heavy ball in both conventions, Adam, the robust input
// shift), elementwise in double with the CPU's expressions (kernels/cpu/residual_math.h).
#include "kernels/common.h"
#include "kernels/cpu/residual_math.h"
#include "kernels/cpu/residual_ref.h"  // ResidualForwardPtrs, ResidualBackwardPtrs
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/residual.h"

namespace moe::kernels::cuda {
namespace {

template <typename F>
__device__ __forceinline__ double at_or_zero(const F* p, int64_t i) {
  return p != nullptr ? static_cast<double>(p[i]) : 0.0;
}

template <typename A, typename F>
__global__ void residual_forward_kernel(ResidualArgs a, int64_t n,
                                        ref::ResidualForwardPtrs<A, F> p) {
  const bool adam = a.form == ResidualForm::kAdam;
  MOE_GRID_LOOP(i, n) {
    const ref::ResidualPoint r = ref::residual_forward_point(
        a, static_cast<double>(load(p.x, i)), static_cast<double>(load(p.u, i)),
        at_or_zero(p.p_in, i), adam ? at_or_zero(p.m_in, i) : 0.0,
        adam ? at_or_zero(p.v_in, i) : 0.0);
    store(p.out, i, r.out);
    p.p_out[i] = static_cast<F>(r.p);
    if (adam) {
      p.m_out[i] = static_cast<F>(r.m);
      p.v_out[i] = static_cast<F>(r.v);
    }
  }
}

template <typename A, typename F>
__global__ void residual_backward_kernel(ResidualArgs a, int64_t n,
                                         ref::ResidualBackwardPtrs<A, F> p) {
  const bool adam = a.form == ResidualForm::kAdam;
  MOE_GRID_LOOP(i, n) {
    const ref::ResidualGrads g = ref::residual_backward_point(
        a, static_cast<double>(load(p.d_out, i)), at_or_zero(p.d_p_out, i),
        adam ? at_or_zero(p.d_m_out, i) : 0.0, adam ? at_or_zero(p.d_v_out, i) : 0.0,
        static_cast<double>(load(p.u, i)), adam ? at_or_zero(p.m_out, i) : 0.0,
        adam ? at_or_zero(p.v_out, i) : 0.0);
    store(p.dx, i, g.dx);
    store(p.du, i, g.du);
    p.d_p_in[i] = static_cast<F>(g.dp);
    if (adam && p.d_m_in != nullptr) p.d_m_in[i] = static_cast<F>(g.dm);
    if (adam && p.d_v_in != nullptr) p.d_v_in[i] = static_cast<F>(g.dv);
  }
}

template <typename A, typename F>
__global__ void shift_kernel(const A* x, const F* p, double a_shift, int64_t n, A* y) {
  MOE_GRID_LOOP(i, n) {
    store(y, i, static_cast<double>(load(x, i)) + a_shift * static_cast<double>(p[i]));
  }
}

}  // namespace

Status residual_forward(Context& ctx, const ResidualArgs& a, const TensorView& x,
                        const TensorView& u, const ResidualState& in, const TensorView& out,
                        const ResidualState& state_out) {
  const TensorView &p_in = in.p, &m_in = in.m, &v_in = in.v;
  const TensorView &p_out = state_out.p, &m_out = state_out.m, &v_out = state_out.v;
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("residual_forward", x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::ResidualForwardPtrs<A, F> p;
    p.x = x.data<A>();
    p.u = u.data<A>();
    p.p_in = data_or_null<F>(p_in);
    p.m_in = data_or_null<F>(m_in);
    p.v_in = data_or_null<F>(v_in);
    p.out = out.data<A>();
    p.p_out = p_out.data<F>();
    p.m_out = data_or_null<F>(m_out);
    p.v_out = data_or_null<F>(v_out);
    residual_forward_kernel<A, F><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(a, n, p);
  }));
  return launch_status("residual_forward");
}

Status residual_backward(Context& ctx, const ResidualArgs& a, const TensorView& d_out,
                         const ResidualState& d_state_out, const TensorView& u,
                         const ResidualState& state_out, const ResidualBackwardOut& grads) {
  const TensorView &d_p_out = d_state_out.p, &d_m_out = d_state_out.m, &d_v_out = d_state_out.v;
  const TensorView &m_out = state_out.m, &v_out = state_out.v;
  const TensorView &dx = grads.dx, &du = grads.du;
  const TensorView &d_p_in = grads.d_in.p, &d_m_in = grads.d_in.m, &d_v_in = grads.d_in.v;
  const int64_t n = d_out.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("residual_backward", d_out, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::ResidualBackwardPtrs<A, F> p;
    p.d_out = d_out.data<A>();
    p.d_p_out = data_or_null<F>(d_p_out);
    p.d_m_out = data_or_null<F>(d_m_out);
    p.d_v_out = data_or_null<F>(d_v_out);
    p.u = u.data<A>();
    p.m_out = data_or_null<F>(m_out);
    p.v_out = data_or_null<F>(v_out);
    p.dx = dx.data<A>();
    p.du = du.data<A>();
    p.d_p_in = d_p_in.data<F>();
    p.d_m_in = data_or_null<F>(d_m_in);
    p.d_v_in = data_or_null<F>(d_v_in);
    residual_backward_kernel<A, F><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(a, n, p);
  }));
  return launch_status("residual_backward");
}

Status residual_shift_input(Context& ctx, const TensorView& x, const TensorView& p, double a_shift,
                            const TensorView& y) {
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("residual_shift_input", x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    shift_kernel<A, F><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(x.data<A>(), p.data<F>(),
                                                                     a_shift, n, y.data<A>());
  }));
  return launch_status("residual_shift_input");
}

}  // namespace moe::kernels::cuda
