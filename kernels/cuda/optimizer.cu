// AdamW and SGD on full-precision master weights, and the squared gradient norm (a deterministic
// reduction over every view, in view order).
#include <cmath>

#include "kernels/common.h"
#include "kernels/cpu/optimizer_math.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/optimizer.h"

namespace moe::kernels::cuda {
namespace {

// The constants of one AdamW step, folded as in the reference (kernels/cpu/optimizer_ref.cc).
template <typename T>
struct AdamConsts {
  T decay, step_size, inv_sqrt_bc2, b1, b2, c1, c2, eps, gs;
};

template <typename T>
__global__ void adamw_kernel(AdamConsts<T> k, int64_t n, T* param, const T* grad, T* m, T* v) {
  MOE_GRID_LOOP(i, n) {
    const T g = k.gs * grad[i];
    const T mi = k.b1 * m[i] + k.c1 * g;
    const T vi = k.b2 * v[i] + k.c2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * k.decay - k.step_size * mi / (sqrt(vi) * k.inv_sqrt_bc2 + k.eps);
  }
}

template <typename T>
__global__ void sgd_kernel(SgdArgs a, int64_t n, T* param, const T* grad, T* buf) {
  const bool momentum = a.momentum > 0;
  MOE_GRID_LOOP(i, n) {
    const double d =
        ref::sgd_direction(a, static_cast<double>(grad[i]), static_cast<double>(param[i]),
                           momentum ? static_cast<double>(buf[i]) : 0.0);
    if (momentum) buf[i] = static_cast<T>(d);
    param[i] = static_cast<T>(static_cast<double>(param[i]) - a.lr * d);
  }
}

template <typename T>
struct Square {
  const T* x;
  __device__ double operator()(int64_t i) const {
    const double v = static_cast<double>(load(x, i));
    return v * v;
  }
};

}  // namespace

Status adamw_step(Context& ctx, const AdamWArgs& a, const TensorView& param, const TensorView& grad,
                  const TensorView& m, const TensorView& v) {
  const int64_t n = param.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("adamw_step", param, [&](auto tag) {
    using T = decltype(tag);
    const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
    const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
    AdamConsts<T> k;
    k.decay = static_cast<T>(1.0 - a.lr * a.weight_decay);
    k.step_size = static_cast<T>(a.lr / bc1);
    k.inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
    k.b1 = static_cast<T>(a.beta1);
    k.b2 = static_cast<T>(a.beta2);
    k.c1 = static_cast<T>(1.0 - a.beta1);
    k.c2 = static_cast<T>(1.0 - a.beta2);
    k.eps = static_cast<T>(a.eps);
    k.gs = static_cast<T>(a.grad_scale);
    adamw_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        k, n, param.data<T>(), grad.data<T>(), m.data<T>(), v.data<T>());
  }));
  return launch_status("adamw_step");
}

Status sgd_step(Context& ctx, const SgdArgs& args, const TensorView& param, const TensorView& grad,
                const TensorView& buf) {
  const int64_t n = param.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_full("sgd_step", param, [&](auto tag) {
    using T = decltype(tag);
    sgd_kernel<T><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        args, n, param.data<T>(), grad.data<T>(), args.momentum > 0 ? buf.data<T>() : nullptr);
  }));
  return launch_status("sgd_step");
}

Status sum_of_squares(Context& ctx, const std::vector<TensorView>& views, const TensorView& out) {
  for (const TensorView& x : views) {
    Status launched = Status::OK();
    MOE_RETURN_IF_ERROR(dispatch_float("sum_of_squares", x, [&](auto tag) {
      using T = decltype(tag);
      launched =
          reduce_sum(ctx, "sum_of_squares", x.numel(), Square<T>{x.data<T>()}, out.data<double>());
    }));
    MOE_RETURN_IF_ERROR(launched);
  }
  return Status::OK();
}

}  // namespace moe::kernels::cuda
