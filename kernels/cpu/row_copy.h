// Whole-row stores for the gathers that fill exchange buffers (the CPU backend).
//
// A capacity buffer is larger than the caches (T = 4096, D = 512, E = 16, C = 640: 21 MB) and is
// next read by the peers' MPI copies or by a kernel that streams it from memory anyway. Written
// with ordinary stores, every destination line is first read into the cache (read for ownership)
// and then written back: twice the memory traffic of the copy. Streaming (non-temporal) stores
// write the lines straight to memory. The bytes stored are the same either way.
#pragma once

#include <cstddef>

namespace moe::kernels::ref {

// Destinations of at least this many bytes are written with streaming stores.
inline constexpr size_t kStreamingStoreBytes = size_t{8} << 20;

// Whether rows of `row_bytes` starting at `dst` (total `total_bytes`) take streaming stores:
// large enough, every row start 16-byte aligned, and the target has them (x86-64).
bool use_streaming_stores(const void* dst, size_t row_bytes, size_t total_bytes);

// dst[0, bytes) = src[0, bytes), or zeros when src is null, with streaming stores. Needs
// use_streaming_stores() to have said yes for dst's buffer (bytes % 16 == 0, dst aligned).
void stream_row(void* dst, const void* src, size_t bytes);

// Orders this thread's streamed rows before its later stores (call once after a range of
// stream_row calls, before another thread may read them).
void stream_fence();

}  // namespace moe::kernels::ref
