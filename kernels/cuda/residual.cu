// The residual dynamics on the GPU (plain, heavy ball in both conventions, Adam, the robust input
// shift), elementwise in double with the CPU's expressions (kernels/cpu/residual_math.h).
#include "kernels/common.h"
#include "kernels/cpu/residual_math.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/residual.h"

namespace moe::kernels::cuda {
namespace {

template <typename F>
__device__ __forceinline__ double at_or_zero(const F* p, int64_t i) {
  return p != nullptr ? static_cast<double>(p[i]) : 0.0;
}

template <typename A, typename F>
__global__ void residual_forward_kernel(ResidualArgs a, const A* x, const A* u, const F* p_in,
                                        const F* m_in, const F* v_in, int64_t n, A* out, F* p_out,
                                        F* m_out, F* v_out) {
  const bool adam = a.form == ResidualForm::kAdam;
  MOE_GRID_LOOP(i, n) {
    const ref::ResidualPoint r = ref::residual_forward_point(
        a, static_cast<double>(load(x, i)), static_cast<double>(load(u, i)), at_or_zero(p_in, i),
        adam ? at_or_zero(m_in, i) : 0.0, adam ? at_or_zero(v_in, i) : 0.0);
    store(out, i, r.out);
    p_out[i] = static_cast<F>(r.p);
    if (adam) {
      m_out[i] = static_cast<F>(r.m);
      v_out[i] = static_cast<F>(r.v);
    }
  }
}

template <typename A, typename F>
__global__ void residual_backward_kernel(ResidualArgs a, const A* d_out, const F* d_p_out,
                                         const F* d_m_out, const F* d_v_out, const A* u,
                                         const F* m_out, const F* v_out, int64_t n, A* dx, A* du,
                                         F* d_p_in, F* d_m_in, F* d_v_in) {
  const bool adam = a.form == ResidualForm::kAdam;
  MOE_GRID_LOOP(i, n) {
    const ref::ResidualGrads g = ref::residual_backward_point(
        a, static_cast<double>(load(d_out, i)), at_or_zero(d_p_out, i),
        adam ? at_or_zero(d_m_out, i) : 0.0, adam ? at_or_zero(d_v_out, i) : 0.0,
        static_cast<double>(load(u, i)), adam ? at_or_zero(m_out, i) : 0.0,
        adam ? at_or_zero(v_out, i) : 0.0);
    store(dx, i, g.dx);
    store(du, i, g.du);
    d_p_in[i] = static_cast<F>(g.dp);
    if (adam && d_m_in != nullptr) d_m_in[i] = static_cast<F>(g.dm);
    if (adam && d_v_in != nullptr) d_v_in[i] = static_cast<F>(g.dv);
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
    residual_forward_kernel<A, F><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        a, x.data<A>(), u.data<A>(), data_or_null<F>(p_in), data_or_null<F>(m_in),
        data_or_null<F>(v_in), n, out.data<A>(), p_out.data<F>(), data_or_null<F>(m_out),
        data_or_null<F>(v_out));
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
    residual_backward_kernel<A, F><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        a, d_out.data<A>(), data_or_null<F>(d_p_out), data_or_null<F>(d_m_out),
        data_or_null<F>(d_v_out), u.data<A>(), data_or_null<F>(m_out), data_or_null<F>(v_out), n,
        dx.data<A>(), du.data<A>(), d_p_in.data<F>(), data_or_null<F>(d_m_in),
        data_or_null<F>(d_v_in));
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
