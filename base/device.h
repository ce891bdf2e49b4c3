// Where memory lives and how work is ordered. Host code never includes CUDA headers through this
// file: a stream is carried as an opaque handle (cudaStream_t is a pointer).
//
// The host "device" runs everything synchronously: its stream is a no-op, copies happen when
// called. On CUDA every copy here is enqueued on a stream and returns before the data lands;
// stream_synchronize() is the wait (core code waits only through Context::synchronize).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace moe {

enum class DeviceType { kHost = 0, kCuda = 1 };

struct Device {
  DeviceType type = DeviceType::kHost;
  int index = 0;

  static Device host() { return Device{}; }
  static Device cuda(int index) { return Device{DeviceType::kCuda, index}; }
  bool is_host() const { return type == DeviceType::kHost; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  bool operator==(const Device& o) const {
    return type == o.type && (is_host() || index == o.index);
  }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string to_string() const;
};

// An opaque stream: nullptr is the host (synchronous) or CUDA default stream.
struct Stream {
  void* handle = nullptr;
};

// True when this binary was built with CUDA support.
bool built_with_cuda();
// Number of usable CUDA devices; 0 when built without CUDA, when no driver or GPU is present, or
// when the runtime reports any error (cudaGetDeviceCount fails on GPU-less machines).
int cuda_device_count();
// Why cuda_device_count() is 0, in words: "built without CUDA", or the runtime's error (a driver
// older than this CUDA needs reads "cudaErrorInsufficientDriver: ..."), or "no CUDA device".
std::string cuda_unavailable_reason();

// This machine's host name ("unknown-host" when it cannot be read), or MOMOE_HOST_NAME when that
// is set and not empty: for tests (ranks on one machine posing as several hosts) and containers
// (whose host name is not the machine's). momoe treats ranks that report the same name as one
// host: the EP placement (parallel.placement), the per-host memory check, the GPU identity.
std::string host_name();

// This process's rank among the ranks on its node, from the launcher's environment
// (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID, PMI_LOCAL_RANK); -1 when none says.
int node_local_rank();
// The CUDA device a rank computes on: the node-local rank modulo the visible devices (momoe-launch
// has then already narrowed CUDA_VISIBLE_DEVICES to one), or `fallback_rank` modulo them when no
// launcher variable is set (one process, or ranks that are threads). kFailedPrecondition naming
// cuda_unavailable_reason() when no device is visible.
StatusOr<int> choose_cuda_device(int fallback_rank);

struct CudaDeviceInfo {
  std::string name;        // "NVIDIA H100 80GB HBM3"
  std::string pci_bus_id;  // "0000:19:00.0": identifies the GPU across processes of a node
  int64_t free_bytes = 0;  // cudaMemGetInfo
  int64_t total_bytes = 0;
  int sm_major = 0, sm_minor = 0;
};
// Name, bus id and memory of `device` (kUnimplemented without CUDA). Reading the free memory
// makes `device` current for the call (creating its context if it has none).
StatusOr<CudaDeviceInfo> cuda_device_info(int device);
// The PCI bus id of `device` ("0000:19:00.0"), without creating a context on any device.
StatusOr<std::string> cuda_pci_bus_id(int device);

// Makes `device` current on this thread for the guard's lifetime and restores the previous one
// (no-op on the host and in builds without CUDA).
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(Device device);
  ~CudaDeviceGuard();
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// A non-blocking CUDA stream on `device` (kUnimplemented without CUDA). destroy_stream(null) is a
// no-op.
StatusOr<Stream> create_stream(int device);
void destroy_stream(Stream stream);
// Waits for all work enqueued on `stream` (no-op on the host).
Status stream_synchronize(Device device, Stream stream);

// Copies `bytes` between any two devices (host<->host, host<->cuda, cuda<->cuda), enqueued on
// `stream`; host<->host copies happen now (and may overlap, like memmove).
Status device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                     Stream stream = {});
Status device_memset_zero(void* ptr, Device device, size_t bytes, Stream stream = {});

}  // namespace moe
