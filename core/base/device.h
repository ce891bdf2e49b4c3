// Where memory lives and how work is ordered. Host code never includes CUDA headers through this
// file: a stream is carried as an opaque handle (cudaStream_t is a pointer).
#pragma once

#include <cstddef>
#include <string>

#include "core/base/status.h"

namespace moe {

enum class DeviceType { kHost = 0, kCuda = 1 };

struct Device {
  DeviceType type = DeviceType::kHost;
  int index = 0;

  static Device host() { return Device{}; }
  static Device cuda(int index) { return Device{DeviceType::kCuda, index}; }
  bool is_host() const { return type == DeviceType::kHost; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  bool operator==(const Device& o) const { return type == o.type && (is_host() || index == o.index); }
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

// For executables (call once from main): keep freed host blocks in the heap instead of returning
// them to the kernel. Activations are allocated and freed every step; without this each reuse of
// a large block costs page faults (measured: ~30% of a CPU training step).
void keep_freed_host_memory();

// Raw allocation on a device. Host memory is 64-byte aligned. Errors name the device and size.
StatusOr<void*> device_malloc(Device device, size_t bytes);
void device_free(Device device, void* ptr);
// Copies `bytes` between any two devices (host<->host, host<->cuda, cuda<->cuda); synchronous.
Status device_memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
Status device_memset_zero(void* ptr, Device device, size_t bytes);

}  // namespace moe
