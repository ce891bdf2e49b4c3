#include "kernels/optimizer.h"

#include <cmath>

#include "kernels/common.h"

namespace moe::kernels {
namespace {

Status check_like(const char* op, const TensorView& ref, const char* name, const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_same_dtype(op, ref, name, t));
  return check_shape(op, name, t, ref.shape());
}

}  // namespace

Status adamw_step(const AdamWArgs& a, const TensorView& param, const TensorView& grad,
                  const TensorView& m, const TensorView& v, Stream stream) {
  constexpr const char* kOp = "adamw_step";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "param", param));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "grad", grad));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "m", m));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "v", v));
  if (a.step < 1) return invalid_argument_error(kOp, ": step = ", a.step, " must be >= 1");
  return dispatch_host_float(kOp, param, [&](auto tag) {
    using T = decltype(tag);
    const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
    const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    for (int64_t i = 0; i < param.numel(); ++i) {
      const double gi = g[i];
      const double mi = a.beta1 * pm[i] + (1 - a.beta1) * gi;
      const double vi = a.beta2 * pv[i] + (1 - a.beta2) * gi * gi;
      pm[i] = static_cast<T>(mi);
      pv[i] = static_cast<T>(vi);
      double pi = static_cast<double>(p[i]) * (1.0 - a.lr * a.weight_decay);
      pi -= a.lr * (mi / bc1) / (std::sqrt(vi / bc2) + a.eps);
      p[i] = static_cast<T>(pi);
    }
  });
}

Status sgd_step(const SgdArgs& a, const TensorView& param, const TensorView& grad,
                const TensorView& buf, Stream stream) {
  constexpr const char* kOp = "sgd_step";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "param", param));
  MOE_RETURN_IF_ERROR(check_like(kOp, param, "grad", grad));
  if (a.momentum > 0) MOE_RETURN_IF_ERROR(check_like(kOp, param, "buf", buf));
  return dispatch_host_float(kOp, param, [&](auto tag) {
    using T = decltype(tag);
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    for (int64_t i = 0; i < param.numel(); ++i) {
      double d = static_cast<double>(g[i]) + a.weight_decay * static_cast<double>(p[i]);
      if (a.momentum > 0) {
        T* b = buf.data<T>();
        d = a.first_step ? d : a.momentum * static_cast<double>(b[i]) + d;
        b[i] = static_cast<T>(d);
      }
      p[i] = static_cast<T>(static_cast<double>(p[i]) - a.lr * d);
    }
  });
}

StatusOr<double> sum_of_squares(const std::vector<TensorView>& views) {
  double total = 0;
  for (const TensorView& t : views) {
    MOE_RETURN_IF_ERROR(dispatch_host_float("sum_of_squares", t, [&](auto tag) {
      using T = decltype(tag);
      const T* p = t.data<T>();
      for (int64_t i = 0; i < t.numel(); ++i) total += static_cast<double>(p[i]) * p[i];
    }));
  }
  return total;
}

Status scale_inplace(const TensorView& x, double alpha, Stream stream) {
  return dispatch_host_float("scale_inplace", x, [&](auto tag) {
    using T = decltype(tag);
    T* p = x.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<T>(alpha * p[i]);
  });
}

Status axpy(double alpha, const TensorView& x, const TensorView& y, Stream stream) {
  constexpr const char* kOp = "axpy";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "y", y));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) py[i] = static_cast<T>(py[i] + alpha * px[i]);
  });
}

Status add(const TensorView& a, const TensorView& b, const TensorView& out, Stream stream) {
  constexpr const char* kOp = "add";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "a", a));
  MOE_RETURN_IF_ERROR(check_like(kOp, a, "b", b));
  MOE_RETURN_IF_ERROR(check_like(kOp, a, "out", out));
  return dispatch_host_float(kOp, a, [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < a.numel(); ++i) po[i] = pa[i] + pb[i];
  });
}

StatusOr<bool> all_finite(const TensorView& x) {
  bool finite = true;
  MOE_RETURN_IF_ERROR(dispatch_host_float("all_finite", x, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t i = 0; i < x.numel() && finite; ++i) finite = std::isfinite(static_cast<double>(p[i]));
  }));
  return finite;
}

}  // namespace moe::kernels
