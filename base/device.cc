#include "base/device.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/check.h"

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

std::string cuda_unavailable_reason() {
#if defined(MOE_WITH_CUDA)
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return str_cat(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  }
  return count == 0 ? std::string("no CUDA device") : str_cat(count, " CUDA device(s) visible");
#else
  return "this build has no CUDA support (configure with MOE_WITH_CUDA=ON)";
#endif
}

std::string host_name() {
  if (const char* fake = std::getenv("MOMOE_HOST_NAME"); fake != nullptr && *fake != '\0') {
    return fake;
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "unknown-host";
  return host;
}

int node_local_rank() {
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end == '\0' && r >= 0) return static_cast<int>(r);
  }
  return -1;
}

StatusOr<int> choose_cuda_device(int fallback_rank) {
  const int count = cuda_device_count();
  if (count == 0) {
    return failed_precondition_error(
        "no CUDA device is usable (", cuda_unavailable_reason(), "; CUDA_VISIBLE_DEVICES=",
        std::getenv("CUDA_VISIBLE_DEVICES") != nullptr ? std::getenv("CUDA_VISIBLE_DEVICES")
                                                       : "(unset)",
        ")");
  }
  const int local = node_local_rank();
  return (local >= 0 ? local : std::max(0, fallback_rank)) % count;
}

StatusOr<CudaDeviceInfo> cuda_device_info(int device) {
#if defined(MOE_WITH_CUDA)
  const int count = cuda_device_count();
  if (device < 0 || device >= count) {
    return failed_precondition_error("cuda:", device, " is not available (",
                                     cuda_unavailable_reason(), ")");
  }
  CudaDeviceGuard guard(Device::cuda(device));
  cudaDeviceProp prop{};
  MOE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  CudaDeviceInfo info;
  info.name = prop.name;
  char bus[32] = {};
  MOE_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
  info.pci_bus_id = bus;
  size_t free_bytes = 0, total_bytes = 0;
  MOE_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  info.free_bytes = static_cast<int64_t>(free_bytes);
  info.total_bytes = static_cast<int64_t>(total_bytes);
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  return info;
#else
  return unimplemented_error("cuda:", device, ": ", cuda_unavailable_reason());
#endif
}

StatusOr<std::string> cuda_pci_bus_id(int device) {
#if defined(MOE_WITH_CUDA)
  char bus[32] = {};
  MOE_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
  return std::string(bus);
#else
  return unimplemented_error("cuda:", device, ": ", cuda_unavailable_reason());
#endif
}

CudaDeviceGuard::CudaDeviceGuard(Device device) {
#if defined(MOE_WITH_CUDA)
  if (!device.is_cuda()) return;
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  if (current == device.index) return;
  if (cudaSetDevice(device.index) == cudaSuccess) {
    previous_ = current;
  } else {
    cudaGetLastError();  // the op that follows reports the device as unusable itself
  }
#else
  (void)device;
#endif
}

CudaDeviceGuard::~CudaDeviceGuard() {
#if defined(MOE_WITH_CUDA)
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
#endif
}

StatusOr<Stream> create_stream(int device) {
#if defined(MOE_WITH_CUDA)
  CudaDeviceGuard on_device(Device::cuda(device));
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

Status device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                     Stream stream) {
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
  return MOE_CUDA_STATUS(cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(stream.handle)));
#else
  return unimplemented_error("memset on ", device.to_string(), ": built without CUDA");
#endif
}

}  // namespace moe
