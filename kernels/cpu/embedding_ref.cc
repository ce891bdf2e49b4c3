#include "kernels/cpu/embedding_ref.h"

#include <algorithm>

#include "base/dtype.h"
#include "base/thread_pool.h"

namespace moe::kernels::ref {

template <typename W, typename A, typename F>
int64_t embedding_forward(const int32_t* ids, int64_t n, const W* table, int64_t v, const F* pos,
                          int64_t s, int64_t d, A* out) {
  for (int64_t r = 0; r < n; ++r) {
    if (ids[r] < 0 || ids[r] >= v) return r;  // before any write: out untouched
  }
  parallel_for(n, row_grain(d), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const W* src = table + static_cast<int64_t>(ids[r]) * d;
      A* dst = out + r * d;
      if (pos == nullptr) {
        for (int64_t j = 0; j < d; ++j) dst[j] = static_cast<A>(static_cast<accum_t<W>>(src[j]));
      } else {
        const F* p = pos + (r % s) * d;
        for (int64_t j = 0; j < d; ++j) dst[j] = static_cast<A>(static_cast<F>(src[j]) + p[j]);
      }
    }
  });
  return -1;
}

template <typename A, typename F>
int64_t embedding_backward(const int32_t* ids, int64_t n, int64_t v, const A* d_out, int64_t s,
                           int64_t d, F* d_table, F* d_pos) {
  for (int64_t r = 0; r < n; ++r) {
    if (ids[r] < 0 || ids[r] >= v) return r;  // before any accumulation: gradients untouched
  }
  // Rows are added in row order; the columns are spread over the threads (a repeated id adds to
  // the same table row, so rows cannot run in parallel).
  constexpr int64_t kCols = 16;
  parallel_for((d + kCols - 1) / kCols,
               std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, n * kCols)),
               [&](int64_t c0, int64_t c1) {
                 const int64_t j0 = c0 * kCols, j1 = std::min(d, c1 * kCols);
                 for (int64_t r = 0; r < n; ++r) {
                   F* dst = d_table + static_cast<int64_t>(ids[r]) * d;
                   const A* src = d_out + r * d;
                   for (int64_t j = j0; j < j1; ++j) dst[j] += static_cast<F>(src[j]);
                   if (d_pos != nullptr) {
                     F* p = d_pos + (r % s) * d;
                     for (int64_t j = j0; j < j1; ++j) p[j] += static_cast<F>(src[j]);
                   }
                 }
               });
  return -1;
}

#define MOE_INSTANTIATE_EMBEDDING_FWD(W, A, F)                                            \
  template int64_t embedding_forward<W, A, F>(const int32_t*, int64_t, const W*, int64_t, \
                                              const F*, int64_t, int64_t, A*);
MOE_INSTANTIATE_EMBEDDING_FWD(float, float, float)
MOE_INSTANTIATE_EMBEDDING_FWD(double, double, double)
MOE_INSTANTIATE_EMBEDDING_FWD(bf16, bf16, float)
MOE_INSTANTIATE_EMBEDDING_FWD(float, bf16, float)
#undef MOE_INSTANTIATE_EMBEDDING_FWD

#define MOE_INSTANTIATE_EMBEDDING_BWD(A, F)                                                      \
  template int64_t embedding_backward<A, F>(const int32_t*, int64_t, int64_t, const A*, int64_t, \
                                            int64_t, F*, F*);
MOE_INSTANTIATE_EMBEDDING_BWD(float, float)
MOE_INSTANTIATE_EMBEDDING_BWD(double, double)
MOE_INSTANTIATE_EMBEDDING_BWD(bf16, float)
#undef MOE_INSTANTIATE_EMBEDDING_BWD

}  // namespace moe::kernels::ref
