#include "kernels/cpu/elementwise_ref.h"

#include <algorithm>
#include <cmath>

#include "base/dtype.h"
#include "base/thread_pool.h"

namespace moe::kernels::ref {

template <typename T>
void add(const T* a, const T* b, int64_t n, T* out) {
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      out[i] = static_cast<T>(static_cast<accum_t<T>>(a[i]) + static_cast<accum_t<T>>(b[i]));
    }
  });
}

template <typename X, typename Y>
void axpy(double alpha, const X* x, int64_t n, Y* y) {
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      y[i] = static_cast<Y>(static_cast<double>(y[i]) + alpha * static_cast<double>(x[i]));
    }
  });
}

template <typename T>
void scale(double alpha, int64_t n, T* x) {
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = static_cast<T>(alpha * static_cast<double>(x[i]));
  });
}

template <typename S, typename D>
void convert(const S* src, int64_t n, D* dst) {
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = static_cast<D>(static_cast<accum_t<S>>(src[i]));
  });
}

template <typename T>
void copy_columns(const T* src, int64_t src_cols, int64_t src_col, T* dst, int64_t dst_cols,
                  int64_t dst_col, int64_t rows, int64_t width) {
  parallel_for(rows, std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, width)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   std::copy_n(src + r * src_cols + src_col, width, dst + r * dst_cols + dst_col);
                 }
               });
}

template <typename T>
int64_t count_nonfinite(const T* x, int64_t n) {
  return blocked_sum<int64_t>(n, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
    int64_t bad = 0;
    for (int64_t i = begin; i < end; ++i) bad += !std::isfinite(static_cast<accum_t<T>>(x[i]));
    return bad;
  });
}

#define MOE_INSTANTIATE_ELEMENTWISE(T)                    \
  template void add<T>(const T*, const T*, int64_t, T*);  \
  template void scale<T>(double, int64_t, T*);            \
  template int64_t count_nonfinite<T>(const T*, int64_t); \
  template void copy_columns<T>(const T*, int64_t, int64_t, T*, int64_t, int64_t, int64_t, int64_t);
MOE_INSTANTIATE_ELEMENTWISE(float)
MOE_INSTANTIATE_ELEMENTWISE(double)
MOE_INSTANTIATE_ELEMENTWISE(bf16)
#undef MOE_INSTANTIATE_ELEMENTWISE

#define MOE_INSTANTIATE_PAIR(X, Y)                         \
  template void axpy<X, Y>(double, const X*, int64_t, Y*); \
  template void convert<X, Y>(const X*, int64_t, Y*);
#define MOE_INSTANTIATE_PAIRS(X)  \
  MOE_INSTANTIATE_PAIR(X, float)  \
  MOE_INSTANTIATE_PAIR(X, double) \
  MOE_INSTANTIATE_PAIR(X, bf16)
MOE_INSTANTIATE_PAIRS(float)
MOE_INSTANTIATE_PAIRS(double)
MOE_INSTANTIATE_PAIRS(bf16)
#undef MOE_INSTANTIATE_PAIRS
#undef MOE_INSTANTIATE_PAIR

}  // namespace moe::kernels::ref
