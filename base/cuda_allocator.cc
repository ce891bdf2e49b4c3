// The CUDA stream-ordered pool allocator (built with MOE_WITH_CUDA; see allocator.h).
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "base/allocator.h"
#include "base/check.h"
#include "base/stream_graph.h"

namespace moe {
namespace {

// Allocations, bytes handed out and their peak, counted on the host (thread-safe; no device
// query, no wait).
class UseCounters {
 public:
  void allocated(size_t bytes) {
    allocations_.fetch_add(1, std::memory_order_relaxed);
    const size_t now = in_use_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    size_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void freed(size_t bytes) { in_use_.fetch_sub(bytes, std::memory_order_relaxed); }
  AllocatorStats stats() const {
    AllocatorStats s;
    s.allocations = allocations_.load();
    s.bytes_in_use = in_use_.load();
    s.peak_bytes_in_use = peak_.load();
    return s;
  }
  void reset_peak() { peak_.store(in_use_.load()); }

 private:
  std::atomic<int64_t> allocations_{0};
  std::atomic<size_t> in_use_{0};
  std::atomic<size_t> peak_{0};
};

class CudaPoolAllocator final : public Allocator {
 public:
  CudaPoolAllocator(int device, cudaMemPool_t pool) : device_(device), pool_(pool) {}

  Device device() const override { return Device::cuda(device_); }

  StatusOr<void*> allocate(size_t bytes, Stream stream) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    CudaDeviceGuard on_device(device());
    void* ptr = nullptr;
    const cudaError_t err =
        cudaMallocFromPoolAsync(&ptr, bytes, pool_, static_cast<cudaStream_t>(stream.handle));
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return resource_exhausted_error("cuda:", device_, " allocation of ", bytes, " bytes failed (",
                                      stats().to_string(), ")");
    }
    note_captured("allocate");
    MOE_CUDA_RETURN_IF_ERROR(err);
    counters_.allocated(bytes);
    return ptr;
  }

  void deallocate(void* ptr, size_t bytes, Stream stream) override {
    if (ptr == nullptr) return;
    CudaDeviceGuard on_device(device());
    // A destructor cannot report; the error must not linger for the next launch check to find.
    if (cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream.handle)) != cudaSuccess) {
      cudaGetLastError();
    }
    note_captured("free");
    counters_.freed(bytes);
  }

  AllocatorStats stats() const override {
    AllocatorStats s = counters_.stats();
    uint64_t reserved = 0;
    // A pool's attributes cannot be read while this thread records a CUDA graph (the call
    // would break the recording): bytes_cached stays 0 then.
    if (!recording_on_this_thread() &&
        cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved) ==
            cudaSuccess) {
      s.bytes_cached = reserved > s.bytes_in_use ? reserved - s.bytes_in_use : 0;
    }
    return s;
  }

  // The host's count of bytes handed out (allocate() calls less deallocate() calls), not the
  // pool's device-side use: no query, no wait.
  void reset_peak() override { counters_.reset_peak(); }

  void release_cached() override {
    CudaDeviceGuard on_device(device());
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(pool_, 0);
  }

 private:
  int device_;
  cudaMemPool_t pool_;
  UseCounters counters_;
};

class PinnedHostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::host(); }

  StatusOr<void*> allocate(size_t bytes, Stream) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    if (recording_on_this_thread()) {  // cudaHostAlloc would break the recording
      return failed_precondition_error(
          "page-locked host memory (", bytes,
          " bytes) allocated while a CUDA graph records: make staging tensors before");
    }
    void* ptr = nullptr;
    const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return resource_exhausted_error("page-locked host allocation of ", bytes, " bytes failed (",
                                      cudaGetErrorString(err), ")");
    }
    counters_.allocated(bytes);
    return ptr;
  }

  void deallocate(void* ptr, size_t bytes, Stream) override {
    if (ptr == nullptr) return;
    if (cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
    note_captured("free (page-locked host memory)");
    counters_.freed(bytes);
  }

  AllocatorStats stats() const override { return counters_.stats(); }
  void reset_peak() override { counters_.reset_peak(); }
  void release_cached() override {}

 private:
  UseCounters counters_;
};

}  // namespace

StatusOr<std::shared_ptr<Allocator>> make_pinned_host_allocator() {
  return std::shared_ptr<Allocator>(std::make_shared<PinnedHostAllocator>());
}

StatusOr<std::shared_ptr<Allocator>> make_cuda_pool_allocator(int device) {
  if (device < 0 || device >= cuda_device_count()) {
    return failed_precondition_error("cuda:", device, " memory pool: no such device (",
                                     cuda_device_count(), " visible)");
  }
  CudaDeviceGuard on_device(Device::cuda(device));
  cudaMemPool_t pool = nullptr;
  MOE_CUDA_RETURN_IF_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
  // Keep freed memory reserved in the pool: the step frees and reallocates the same sizes.
  uint64_t threshold = UINT64_MAX;
  MOE_CUDA_RETURN_IF_ERROR(
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  return std::shared_ptr<Allocator>(std::make_shared<CudaPoolAllocator>(device, pool));
}

}  // namespace moe
