// Where memory lives and how work is ordered. Host code never includes CUDA headers through this
// file: a stream is carried as an opaque handle (cudaStream_t is a pointer).
//
// The host "device" runs everything synchronously: its stream is a no-op, copies happen when
// called. On CUDA every copy here is enqueued on a stream and returns before the data lands;
// stream_synchronize() is the wait (core code waits only through Context::synchronize).
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
