#include "kernels/cpu/optimizer_ref.h"

#include <cmath>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/cpu/optimizer_math.h"

namespace moe::kernels::ref {

// The update in the parameter's precision (fp32 master weights, as PyTorch's AdamW), with the
// bias corrections folded into two scalars so that the loop vectorises:
//   p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps).
template <typename T>
void adamw_step(const AdamWArgs& a, int64_t n, T* param, const T* grad, T* m, T* v) {
  const double bc1 = 1.0 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = 1.0 - std::pow(a.beta2, static_cast<double>(a.step));
  const T decay = static_cast<T>(1.0 - a.lr * a.weight_decay);
  const T step_size = static_cast<T>(a.lr / bc1);
  const T inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
  const T b1 = static_cast<T>(a.beta1), b2 = static_cast<T>(a.beta2);
  const T c1 = static_cast<T>(1.0 - a.beta1), c2 = static_cast<T>(1.0 - a.beta2);
  const T eps = static_cast<T>(a.eps);
  const T gs = static_cast<T>(a.grad_scale);
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T g = gs * grad[i];
      const T mi = b1 * m[i] + c1 * g;
      const T vi = b2 * v[i] + c2 * g * g;
      m[i] = mi;
      v[i] = vi;
      param[i] = param[i] * decay - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps);
    }
  });
}

template <typename T>
void sgd_step(const SgdArgs& a, int64_t n, T* param, const T* grad, T* buf) {
  const bool momentum = a.momentum > 0;
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const double d = sgd_direction(a, static_cast<double>(grad[i]), static_cast<double>(param[i]),
                                     momentum ? static_cast<double>(buf[i]) : 0.0);
      if (momentum) buf[i] = static_cast<T>(d);
      param[i] = static_cast<T>(static_cast<double>(param[i]) - a.lr * d);
    }
  });
}

// One block, summed in order in four lanes (so the loop vectorises).
template <typename T>
double block_sum_of_squares(const T* x, int64_t begin, int64_t end) {
  double lane[4] = {0, 0, 0, 0};
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    for (int l = 0; l < 4; ++l) {
      const double v = static_cast<double>(x[i + l]);
      lane[l] += v * v;
    }
  }
  for (; i < end; ++i) lane[0] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

// Blocks of kSquaresBlock elements, then added in block order.
template <typename T>
void accumulate_sum_of_squares(const T* x, int64_t n, double* total) {
  *total += blocked_sum<double>(n, kSquaresBlock, [&](int64_t begin, int64_t end) {
    return block_sum_of_squares(x, begin, end);
  });
}

template <typename T>
void sum_of_squares_blocks(const T* x, int64_t n, double* out) {
  const FixedBlocks blocks{n, kSquaresBlock};
  parallel_for(blocks.count(), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      out[b] = block_sum_of_squares(x, blocks.begin(b), blocks.end(b));
  });
}

void accumulate_in_order(const double* x, int64_t n, double* total) {
  double sum = 0;  // as blocked_sum adds its blocks
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  *total += sum;
}

#define MOE_INSTANTIATE_SQUARES(T)                                        \
  template double block_sum_of_squares<T>(const T*, int64_t, int64_t);    \
  template void accumulate_sum_of_squares<T>(const T*, int64_t, double*); \
  template void sum_of_squares_blocks<T>(const T*, int64_t, double*);
MOE_INSTANTIATE_SQUARES(float)
MOE_INSTANTIATE_SQUARES(double)
MOE_INSTANTIATE_SQUARES(bf16)
#undef MOE_INSTANTIATE_SQUARES

#define MOE_INSTANTIATE_OPTIMIZER(T)                                            \
  template void adamw_step<T>(const AdamWArgs&, int64_t, T*, const T*, T*, T*); \
  template void sgd_step<T>(const SgdArgs&, int64_t, T*, const T*, T*);
MOE_INSTANTIATE_OPTIMIZER(float)
MOE_INSTANTIATE_OPTIMIZER(double)
#undef MOE_INSTANTIATE_OPTIMIZER

}  // namespace moe::kernels::ref
