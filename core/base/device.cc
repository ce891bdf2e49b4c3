#include "core/base/device.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "core/base/check.h"

#if defined(MOE_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace moe {

std::string Device::to_string() const {
  return is_host() ? std::string("host") : str_cat("cuda:", index);
}

void keep_freed_host_memory() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

bool built_with_cuda() {
#if defined(MOE_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#if defined(MOE_WITH_CUDA)
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

StatusOr<void*> device_malloc(Device device, size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  if (device.is_host()) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* ptr = std::aligned_alloc(64, rounded);
    if (ptr == nullptr) return resource_exhausted_error("host allocation of ", bytes, " bytes failed");
    return ptr;
  }
#if defined(MOE_WITH_CUDA)
  MOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.index));
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return resource_exhausted_error("cuda:", device.index, " allocation of ", bytes, " bytes failed");
  }
  MOE_CUDA_RETURN_IF_ERROR(err);
  return ptr;
#else
  return unimplemented_error("allocation on ", device.to_string(), ": built without CUDA");
#endif
}

void device_free(Device device, void* ptr) {
  if (ptr == nullptr) return;
  if (device.is_host()) {
    std::free(ptr);
    return;
  }
#if defined(MOE_WITH_CUDA)
  cudaFree(ptr);
#endif
}

Status device_memcpy(void* dst, Device dst_device, const void* src, Device src_device,
                     size_t bytes) {
  if (bytes == 0) return Status::OK();
  if (dst_device.is_host() && src_device.is_host()) {
    std::memmove(dst, src, bytes);
    return Status::OK();
  }
#if defined(MOE_WITH_CUDA)
  return MOE_CUDA_STATUS(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
#else
  return unimplemented_error("copy between ", src_device.to_string(), " and ",
                             dst_device.to_string(), ": built without CUDA");
#endif
}

Status device_memset_zero(void* ptr, Device device, size_t bytes) {
  if (bytes == 0) return Status::OK();
  if (device.is_host()) {
    std::memset(ptr, 0, bytes);
    return Status::OK();
  }
#if defined(MOE_WITH_CUDA)
  return MOE_CUDA_STATUS(cudaMemset(ptr, 0, bytes));
#else
  return unimplemented_error("memset on ", device.to_string(), ": built without CUDA");
#endif
}

}  // namespace moe
