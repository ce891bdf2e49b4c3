// Stream-ordered caching allocators: where a Context's tensors come from. The training step
// allocates and frees the same shapes every step; a cache turns that into free-list pops instead
// of malloc/cudaMalloc calls (and, on the host, instead of the page faults of fresh mmaps).
//
// Contract (every implementation):
// - allocate(bytes, stream): memory that work enqueued on `stream` after this call may use.
//   bytes == 0 gives nullptr. Failure is kResourceExhausted naming the device and the size.
// - deallocate(ptr, bytes, stream): the block may be reused by work enqueued on `stream` after
//   this call (stream-ordered free: pending work on `stream` that reads it is safe). `bytes` is
//   the size passed to allocate.
// - Thread-safe: ranks of the Local backend are threads, and a tensor may be freed on a thread
//   other than the one that allocated it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/device.h"

namespace moe {

struct AllocatorStats {
  int64_t allocations = 0;  // allocate() calls with bytes > 0
  int64_t cache_hits = 0;   // of those, served from the cache
  size_t bytes_in_use = 0;  // handed out and not yet returned (bucket sizes)
  size_t peak_bytes_in_use = 0;
  size_t bytes_cached = 0;  // returned blocks held for reuse
  std::string to_string() const;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  virtual Device device() const = 0;
  virtual StatusOr<void*> allocate(size_t bytes, Stream stream) = 0;
  virtual void deallocate(void* ptr, size_t bytes, Stream stream) = 0;
  virtual AllocatorStats stats() const = 0;
  // Lowers peak_bytes_in_use to the bytes in use now, so that the next stats() gives the peak
  // since this call (the trainer measures each step's peak so). Host-side counters only: never
  // waits for the device.
  virtual void reset_peak() = 0;
  // Frees every cached (returned) block back to the system.
  virtual void release_cached() = 0;

 protected:
  Allocator() = default;
};

// Host memory (64-byte aligned) with a cache of returned blocks: sizes are rounded up to a bucket
// (at most 1/8 larger), and a request is served from a returned block of the same bucket. When
// the cache would exceed `cache_limit_bytes`, the returned block is freed instead.
std::shared_ptr<Allocator> make_host_caching_allocator(size_t cache_limit_bytes = size_t{8} << 30);

// CUDA device memory from a stream-ordered pool (cudaMallocFromPoolAsync / cudaFreeAsync on the
// device's own memory pool, with a release threshold so freed memory stays reserved). Needs a
// build with MOE_WITH_CUDA and a device; otherwise kUnimplemented / kFailedPrecondition.
StatusOr<std::shared_ptr<Allocator>> make_cuda_pool_allocator(int device);

// Page-locked host memory (cudaHostAlloc) for staging buffers a device copies from without
// waiting (a copy from pageable memory is staged by the driver and cannot be captured in a CUDA
// graph). No cache: staging buffers live as long as their owner. Freeing waits for the device
// (cudaFreeHost), so it is meant for long-lived buffers. kUnimplemented without CUDA.
StatusOr<std::shared_ptr<Allocator>> make_pinned_host_allocator();

// The bucket a request of `bytes` is rounded up to (exposed for tests): multiples of 64 up to
// 512 bytes, then the next of {8, 9, ..., 15} * 2^k.
size_t allocator_bucket_size(size_t bytes);

}  // namespace moe
