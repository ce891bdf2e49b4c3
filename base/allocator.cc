#include "base/allocator.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/check.h"

namespace moe {

std::string AllocatorStats::to_string() const {
  return str_cat("allocations ", allocations, " (cache hits ", cache_hits, "), in use ",
                 bytes_in_use, " B (peak ", peak_bytes_in_use, " B), cached ", bytes_cached, " B");
}

size_t allocator_bucket_size(size_t bytes) {
  if (bytes <= 512) return (bytes + 63) / 64 * 64;
  // 2^k <= bytes < 2^(k+1): buckets are 2^(k-3) apart.
  int k = 63 - __builtin_clzll(static_cast<unsigned long long>(bytes));
  const size_t step = size_t{1} << (k - 3);
  return (bytes + step - 1) / step * step;
}

namespace {

class HostCachingAllocator final : public Allocator {
 public:
  explicit HostCachingAllocator(size_t cache_limit) : cache_limit_(cache_limit) {}
  ~HostCachingAllocator() override { release_cached(); }

  Device device() const override { return Device::host(); }

  StatusOr<void*> allocate(size_t bytes, Stream) override {
    if (bytes == 0) return static_cast<void*>(nullptr);
    const size_t bucket = allocator_bucket_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.allocations;
      auto it = free_.find(bucket);
      if (it != free_.end() && !it->second.empty()) {
        void* ptr = it->second.back();
        it->second.pop_back();
        ++stats_.cache_hits;
        stats_.bytes_cached -= bucket;
        note_in_use(bucket);
        return ptr;
      }
    }
    void* ptr = std::aligned_alloc(64, bucket);
    if (ptr == nullptr) {
      // Give the cache back and try once more before reporting.
      release_cached();
      ptr = std::aligned_alloc(64, bucket);
      if (ptr == nullptr) {
        return resource_exhausted_error("host allocation of ", bytes, " bytes failed (",
                                        stats().to_string(), ")");
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    note_in_use(bucket);
    return ptr;
  }

  void deallocate(void* ptr, size_t bytes, Stream) override {
    if (ptr == nullptr) return;
    const size_t bucket = allocator_bucket_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.bytes_in_use -= bucket;
      if (stats_.bytes_cached + bucket <= cache_limit_) {
        free_[bucket].push_back(ptr);
        stats_.bytes_cached += bucket;
        return;
      }
    }
    std::free(ptr);
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

  void release_cached() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [bucket, blocks] : free_) {
      for (void* p : blocks) std::free(p);
    }
    free_.clear();
    stats_.bytes_cached = 0;
  }

 private:
  void note_in_use(size_t bucket) {
    stats_.bytes_in_use += bucket;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) {
      stats_.peak_bytes_in_use = stats_.bytes_in_use;
    }
  }

  const size_t cache_limit_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

}  // namespace

std::shared_ptr<Allocator> make_host_caching_allocator(size_t cache_limit_bytes) {
  return std::make_shared<HostCachingAllocator>(cache_limit_bytes);
}

#if !defined(MOE_WITH_CUDA)
StatusOr<std::shared_ptr<Allocator>> make_cuda_pool_allocator(int device) {
  return unimplemented_error("cuda:", device, " memory pool: built without CUDA");
}
StatusOr<std::shared_ptr<Allocator>> make_pinned_host_allocator() {
  return unimplemented_error("page-locked host memory: built without CUDA");
}
#endif

}  // namespace moe
