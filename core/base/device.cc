#include "core/base/device.h"

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

StatusOr<Stream> create_stream(int device) {
#if defined(MOE_WITH_CUDA)
  MOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaStream_t s = nullptr;
  MOE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream{s};
#else
  return unimplemented_error("stream on cuda:", device, ": built without CUDA");
#endif
}

void destroy_stream(Stream stream) {
#if defined(MOE_WITH_CUDA)
  if (stream.handle != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream.handle));
#endif
}

Status stream_synchronize(Device device, Stream stream) {
  if (device.is_host()) return Status::OK();
#if defined(MOE_WITH_CUDA)
  return MOE_CUDA_STATUS(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)));
#else
  return unimplemented_error("synchronize on ", device.to_string(), ": built without CUDA");
#endif
}

Status device_memcpy(void* dst, Device dst_device, const void* src, Device src_device,
                     size_t bytes, Stream stream) {
  if (bytes == 0) return Status::OK();
  if (dst_device.is_host() && src_device.is_host()) {
    std::memmove(dst, src, bytes);
    return Status::OK();
  }
#if defined(MOE_WITH_CUDA)
  return MOE_CUDA_STATUS(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                                         static_cast<cudaStream_t>(stream.handle)));
#else
  return unimplemented_error("copy between ", src_device.to_string(), " and ",
                             dst_device.to_string(), ": built without CUDA");
#endif
}

Status device_memset_zero(void* ptr, Device device, size_t bytes, Stream stream) {
  if (bytes == 0) return Status::OK();
  if (device.is_host()) {
    std::memset(ptr, 0, bytes);
    return Status::OK();
  }
#if defined(MOE_WITH_CUDA)
  return MOE_CUDA_STATUS(
      cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(stream.handle)));
#else
  return unimplemented_error("memset on ", device.to_string(), ": built without CUDA");
#endif
}

}  // namespace moe
