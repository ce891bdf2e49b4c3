#include "kernels/cpu/row_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define MOE_HAVE_STREAMING_STORES 1
#else
#define MOE_HAVE_STREAMING_STORES 0
#endif

namespace moe::kernels::ref {

bool use_streaming_stores(const void* dst, size_t row_bytes, size_t total_bytes) {
  return MOE_HAVE_STREAMING_STORES && total_bytes >= kStreamingStoreBytes && row_bytes % 16 == 0 &&
         reinterpret_cast<uintptr_t>(dst) % 16 == 0;
}

#if MOE_HAVE_STREAMING_STORES

void stream_row(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<__m128i*>(dst);
  const size_t n = bytes / 16;
  size_t i = 0;
  if (src == nullptr) {
    const __m128i z = _mm_setzero_si128();
    for (; i < n; ++i) _mm_stream_si128(d + i, z);
    return;
  }
  const auto* s = static_cast<const __m128i*>(src);
  // Four loads, then four stores: one 64-byte line per iteration.
  for (; i + 4 <= n; i += 4) {
    const __m128i a = _mm_loadu_si128(s + i), b = _mm_loadu_si128(s + i + 1),
                  c = _mm_loadu_si128(s + i + 2), e = _mm_loadu_si128(s + i + 3);
    _mm_stream_si128(d + i, a);
    _mm_stream_si128(d + i + 1, b);
    _mm_stream_si128(d + i + 2, c);
    _mm_stream_si128(d + i + 3, e);
  }
  for (; i < n; ++i) _mm_stream_si128(d + i, _mm_loadu_si128(s + i));
}

void stream_fence() { _mm_sfence(); }

#else

void stream_row(void* dst, const void* src, size_t bytes) {
  if (src == nullptr) {
    std::memset(dst, 0, bytes);
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void stream_fence() {}

#endif

}  // namespace moe::kernels::ref
