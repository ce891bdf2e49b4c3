#include "kernels/cpu/layernorm_ref.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"

namespace moe::kernels::ref {

template <typename T, typename F>
void layernorm_forward(const T* x, const F* gamma, const F* beta, int64_t n, int64_t d, double eps,
                       const LayerNormForwardOut<T, F>& out) {
  T* y = out.y;
  F* mean = out.mean;
  F* rstd = out.rstd;
  parallel_for(n, row_grain(3 * d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * d;
      double m = 0;
      for (int64_t j = 0; j < d; ++j) m += row[j];
      m /= static_cast<double>(d);
      double var = 0;
      for (int64_t j = 0; j < d; ++j) {
        const double c = static_cast<double>(row[j]) - m;
        var += c * c;
      }
      var /= static_cast<double>(d);
      const double rs = 1.0 / std::sqrt(var + eps);
      mean[r] = static_cast<F>(m);
      rstd[r] = static_cast<F>(rs);
      // Element j is read before y[j] is written, so y may alias x.
      for (int64_t j = 0; j < d; ++j) {
        const double xhat = (static_cast<double>(row[j]) - m) * rs;
        y[r * d + j] = static_cast<T>(xhat * gamma[j] + beta[j]);
      }
    }
  });
}

// With xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean_j(g) - xhat * mean_j(g * xhat)),
//   dgamma += sum_rows dy * xhat,  dbeta += sum_rows dy.
template <typename T, typename F>
void layernorm_backward(const T* dy, const T* x, const F* gamma, const F* mean, const F* rstd,
                        int64_t n, int64_t d, const LayerNormBackwardOut<T, F>& grads) {
  T* dx = grads.dx;
  F* dgamma = grads.dgamma;
  F* dbeta = grads.dbeta;
  // dgamma and dbeta first (dx may alias dy): each column summed over the rows in row order, the
  // columns spread over the threads.
  constexpr int64_t kCols = 16;
  parallel_for((d + kCols - 1) / kCols,
               std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, n * kCols)),
               [&](int64_t c0, int64_t c1) {
                 const int64_t j0 = c0 * kCols, j1 = std::min(d, c1 * kCols);
                 std::vector<double> dg_sum(j1 - j0, 0.0), db_sum(j1 - j0, 0.0);
                 for (int64_t r = 0; r < n; ++r) {
                   const double m = mean[r], rs = rstd[r];
                   for (int64_t j = j0; j < j1; ++j) {
                     const double dyj = dy[r * d + j];
                     dg_sum[j - j0] += dyj * ((static_cast<double>(x[r * d + j]) - m) * rs);
                     db_sum[j - j0] += dyj;
                   }
                 }
                 for (int64_t j = j0; j < j1; ++j) {
                   dgamma[j] = static_cast<F>(static_cast<double>(dgamma[j]) + dg_sum[j - j0]);
                   dbeta[j] = static_cast<F>(static_cast<double>(dbeta[j]) + db_sum[j - j0]);
                 }
               });
  parallel_for(n, row_grain(4 * d), [&](int64_t r0, int64_t r1) {
    std::vector<double> xhat(d), g(d);
    for (int64_t r = r0; r < r1; ++r) {
      const double m = mean[r], rs = rstd[r];
      double mean_g = 0, mean_g_xhat = 0;
      for (int64_t j = 0; j < d; ++j) {
        xhat[j] = (static_cast<double>(x[r * d + j]) - m) * rs;
        g[j] = static_cast<double>(dy[r * d + j]) * static_cast<double>(gamma[j]);
        mean_g += g[j];
        mean_g_xhat += g[j] * xhat[j];
      }
      mean_g /= static_cast<double>(d);
      mean_g_xhat /= static_cast<double>(d);
      // dy of this row is fully read above, so dx may alias dy.
      for (int64_t j = 0; j < d; ++j) {
        dx[r * d + j] = static_cast<T>(rs * (g[j] - mean_g - xhat[j] * mean_g_xhat));
      }
    }
  });
}

template <typename T, typename F>
void rmsnorm_forward(const T* x, const F* gamma, int64_t n, int64_t d, double eps,
                     const RmsNormForwardOut<T, F>& out) {
  T* y = out.y;
  F* rstd = out.rstd;
  parallel_for(n, row_grain(2 * d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = x + r * d;
      double ms = 0;
      for (int64_t j = 0; j < d; ++j) {
        const double v = static_cast<double>(row[j]);
        ms += v * v;
      }
      ms /= static_cast<double>(d);
      const double rs = 1.0 / std::sqrt(ms + eps);
      rstd[r] = static_cast<F>(rs);
      // Element j is read before y[j] is written, so y may alias x.
      for (int64_t j = 0; j < d; ++j) {
        const double xhat = static_cast<double>(row[j]) * rs;
        y[r * d + j] = static_cast<T>(xhat * gamma[j]);
      }
    }
  });
}

// With xhat = x * rstd and g = dy * gamma:
//   dx = rstd * (g - xhat * mean_j(g * xhat)),  dgamma += sum_rows dy * xhat.
template <typename T, typename F>
void rmsnorm_backward(const T* dy, const T* x, const F* gamma, const F* rstd, int64_t n, int64_t d,
                      const RmsNormBackwardOut<T, F>& grads) {
  T* dx = grads.dx;
  F* dgamma = grads.dgamma;
  // dgamma first (dx may alias dy): each column summed over the rows in row order, the columns
  // spread over the threads.
  constexpr int64_t kCols = 16;
  parallel_for((d + kCols - 1) / kCols,
               std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, n * kCols)),
               [&](int64_t c0, int64_t c1) {
                 const int64_t j0 = c0 * kCols, j1 = std::min(d, c1 * kCols);
                 std::vector<double> dg_sum(j1 - j0, 0.0);
                 for (int64_t r = 0; r < n; ++r) {
                   const double rs = rstd[r];
                   for (int64_t j = j0; j < j1; ++j) {
                     dg_sum[j - j0] += static_cast<double>(dy[r * d + j]) *
                                       (static_cast<double>(x[r * d + j]) * rs);
                   }
                 }
                 for (int64_t j = j0; j < j1; ++j) {
                   dgamma[j] = static_cast<F>(static_cast<double>(dgamma[j]) + dg_sum[j - j0]);
                 }
               });
  parallel_for(n, row_grain(3 * d), [&](int64_t r0, int64_t r1) {
    std::vector<double> xhat(d), g(d);
    for (int64_t r = r0; r < r1; ++r) {
      const double rs = rstd[r];
      double mean_g_xhat = 0;
      for (int64_t j = 0; j < d; ++j) {
        xhat[j] = static_cast<double>(x[r * d + j]) * rs;
        g[j] = static_cast<double>(dy[r * d + j]) * static_cast<double>(gamma[j]);
        mean_g_xhat += g[j] * xhat[j];
      }
      mean_g_xhat /= static_cast<double>(d);
      // dy of this row is fully read above, so dx may alias dy.
      for (int64_t j = 0; j < d; ++j) {
        dx[r * d + j] = static_cast<T>(rs * (g[j] - xhat[j] * mean_g_xhat));
      }
    }
  });
}

#define MOE_INSTANTIATE_LAYERNORM(T, F)                                                          \
  template void layernorm_forward<T, F>(const T*, const F*, const F*, int64_t, int64_t, double,  \
                                        const LayerNormForwardOut<T, F>&);                       \
  template void layernorm_backward<T, F>(const T*, const T*, const F*, const F*, const F*,       \
                                         int64_t, int64_t, const LayerNormBackwardOut<T, F>&);   \
  template void rmsnorm_forward<T, F>(const T*, const F*, int64_t, int64_t, double,              \
                                      const RmsNormForwardOut<T, F>&);                           \
  template void rmsnorm_backward<T, F>(const T*, const T*, const F*, const F*, int64_t, int64_t, \
                                       const RmsNormBackwardOut<T, F>&);
MOE_INSTANTIATE_LAYERNORM(float, float)
MOE_INSTANTIATE_LAYERNORM(double, double)
MOE_INSTANTIATE_LAYERNORM(bf16, float)
#undef MOE_INSTANTIATE_LAYERNORM

}  // namespace moe::kernels::ref
