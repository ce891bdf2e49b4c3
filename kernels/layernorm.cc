#include "kernels/layernorm.h"

#include <cmath>
#include <vector>

#include "kernels/common.h"

namespace moe::kernels {
namespace {

Status check_args(const char* op, const TensorView& x, const TensorView& gamma,
                  const TensorView& mean, const TensorView& rstd) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "x", x));
  if (x.ndim() != 2) return invalid_argument_error(op, ": x must be [N, D], got ", x.to_string());
  MOE_RETURN_IF_ERROR(check_same_dtype(op, x, "gamma", gamma));
  MOE_RETURN_IF_ERROR(check_shape(op, "gamma", gamma, Shape{x.dim(1)}));
  MOE_RETURN_IF_ERROR(check_same_dtype(op, x, "mean", mean));
  MOE_RETURN_IF_ERROR(check_shape(op, "mean", mean, Shape{x.dim(0)}));
  MOE_RETURN_IF_ERROR(check_same_dtype(op, x, "rstd", rstd));
  return check_shape(op, "rstd", rstd, Shape{x.dim(0)});
}

}  // namespace

Status layernorm_forward(const TensorView& x, const TensorView& gamma, const TensorView& beta,
                         double eps, const TensorView& y, const TensorView& mean,
                         const TensorView& rstd, Stream stream) {
  constexpr const char* kOp = "layernorm_forward";
  MOE_RETURN_IF_ERROR(check_args(kOp, x, gamma, mean, rstd));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "beta", beta));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "beta", beta, gamma.shape()));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "y", y));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "y", y, x.shape()));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = x.dim(0), d = x.dim(1);
    const T* px = x.data<T>();
    const T* g = gamma.data<T>();
    const T* b = beta.data<T>();
    T* py = y.data<T>();
    for (int64_t r = 0; r < n; ++r) {
      const T* row = px + r * d;
      double m = 0;
      for (int64_t j = 0; j < d; ++j) m += row[j];
      m /= static_cast<double>(d);
      double var = 0;
      for (int64_t j = 0; j < d; ++j) var += (row[j] - m) * (row[j] - m);
      var /= static_cast<double>(d);
      const double rs = 1.0 / std::sqrt(var + eps);
      mean.data<T>()[r] = static_cast<T>(m);
      rstd.data<T>()[r] = static_cast<T>(rs);
      for (int64_t j = 0; j < d; ++j) {
        py[r * d + j] = static_cast<T>((row[j] - m) * rs * g[j] + b[j]);
      }
    }
  });
}

Status layernorm_backward(const TensorView& dy, const TensorView& x, const TensorView& gamma,
                          const TensorView& mean, const TensorView& rstd, const TensorView& dx,
                          const TensorView& dgamma, const TensorView& dbeta, Stream stream) {
  constexpr const char* kOp = "layernorm_backward";
  MOE_RETURN_IF_ERROR(check_args(kOp, x, gamma, mean, rstd));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "dy", dy));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "dy", dy, x.shape()));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "dx", dx));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "dx", dx, x.shape()));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "dgamma", dgamma, gamma.shape()));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "dbeta", dbeta, gamma.shape()));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t n = x.dim(0), d = x.dim(1);
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    const T* g = gamma.data<T>();
    T* pdx = dx.data<T>();
    T* dg = dgamma.data<T>();
    T* db = dbeta.data<T>();
    std::vector<double> xhat(d), dxhat(d);
    for (int64_t r = 0; r < n; ++r) {
      const double m = mean.data<T>()[r], rs = rstd.data<T>()[r];
      double mean_dxhat = 0, mean_dxhat_xhat = 0;
      for (int64_t j = 0; j < d; ++j) {
        xhat[j] = (px[r * d + j] - m) * rs;
        dxhat[j] = static_cast<double>(pdy[r * d + j]) * g[j];
        mean_dxhat += dxhat[j];
        mean_dxhat_xhat += dxhat[j] * xhat[j];
        dg[j] += static_cast<T>(pdy[r * d + j] * xhat[j]);
        db[j] += pdy[r * d + j];
      }
      mean_dxhat /= static_cast<double>(d);
      mean_dxhat_xhat /= static_cast<double>(d);
      for (int64_t j = 0; j < d; ++j) {
        pdx[r * d + j] = static_cast<T>(rs * (dxhat[j] - mean_dxhat - xhat[j] * mean_dxhat_xhat));
      }
    }
  });
}

}  // namespace moe::kernels
