#include "kernels/reference/embedding_ref.h"

#include "core/base/dtype.h"

namespace moe::kernels::ref {

template <typename W, typename A, typename F>
int64_t embedding_forward(const int32_t* ids, int64_t n, const W* table, int64_t v, const F* pos,
                          int64_t s, int64_t d, A* out) {
  for (int64_t r = 0; r < n; ++r) {
    if (ids[r] < 0 || ids[r] >= v) return r;  // before any write: out untouched
  }
  for (int64_t r = 0; r < n; ++r) {
    const W* src = table + static_cast<int64_t>(ids[r]) * d;
    A* dst = out + r * d;
    if (pos == nullptr) {
      for (int64_t j = 0; j < d; ++j) dst[j] = static_cast<A>(static_cast<accum_t<W>>(src[j]));
    } else {
      const F* p = pos + (r % s) * d;
      for (int64_t j = 0; j < d; ++j) dst[j] = static_cast<A>(static_cast<F>(src[j]) + p[j]);
    }
  }
  return -1;
}

template <typename A, typename F>
int64_t embedding_backward(const int32_t* ids, int64_t n, int64_t v, const A* d_out, int64_t s,
                           int64_t d, F* d_table, F* d_pos) {
  for (int64_t r = 0; r < n; ++r) {
    if (ids[r] < 0 || ids[r] >= v) return r;  // before any accumulation: gradients untouched
  }
  for (int64_t r = 0; r < n; ++r) {
    F* dst = d_table + static_cast<int64_t>(ids[r]) * d;
    const A* src = d_out + r * d;
    for (int64_t j = 0; j < d; ++j) dst[j] += static_cast<F>(src[j]);
    if (d_pos != nullptr) {
      F* p = d_pos + (r % s) * d;
      for (int64_t j = 0; j < d; ++j) p[j] += static_cast<F>(src[j]);
    }
  }
  return -1;
}

#define MOE_INSTANTIATE_EMBEDDING_FWD(W, A, F)                                                   \
  template int64_t embedding_forward<W, A, F>(const int32_t*, int64_t, const W*, int64_t,       \
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
