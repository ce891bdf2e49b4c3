#include "kernels/reference/embedding_ref.h"

#include <algorithm>

namespace moe::kernels::ref {

template <typename T>
void embedding_forward(const int32_t* ids, int64_t n, const T* table, int64_t d, T* out) {
  for (int64_t r = 0; r < n; ++r) {
    const T* src = table + static_cast<int64_t>(ids[r]) * d;
    std::copy(src, src + d, out + r * d);
  }
}

template <typename T>
void embedding_backward(const int32_t* ids, int64_t n, const T* d_out, int64_t d, T* d_table) {
  for (int64_t r = 0; r < n; ++r) {
    T* dst = d_table + static_cast<int64_t>(ids[r]) * d;
    const T* src = d_out + r * d;
    for (int64_t j = 0; j < d; ++j) dst[j] += src[j];
  }
}

#define MOE_INSTANTIATE_EMBEDDING(T)                                                  \
  template void embedding_forward<T>(const int32_t*, int64_t, const T*, int64_t, T*); \
  template void embedding_backward<T>(const int32_t*, int64_t, const T*, int64_t, T*);
MOE_INSTANTIATE_EMBEDDING(float)
MOE_INSTANTIATE_EMBEDDING(double)
#undef MOE_INSTANTIATE_EMBEDDING

}  // namespace moe::kernels::ref
