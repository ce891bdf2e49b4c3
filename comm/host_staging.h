// Host windows onto views for host-only backends (MPI): a host view is used in place; a device
// view is copied through a host buffer (in before the exchange, out after it). Internal to comm/.
//
// Stream contract: staging an input copies on `stream` (after the producer's work) and waits for
// the copy; finishing an output copies back on the same stream and waits, so work enqueued
// afterwards on any stream sees the data.
#pragma once

#include <cstddef>
#include <vector>

#include "base/device.h"
#include "base/tensor.h"

namespace moe::comm {

class HostStage {
 public:
  // `view` will be read: a device view is copied to the host now.
  static StatusOr<HostStage> input(const TensorView& view, Stream stream);
  // `view` will be written (and read, for in-place use): a device view gets a host buffer
  // holding a copy of its current contents; finish() copies it back.
  static StatusOr<HostStage> output(const TensorView& view, Stream stream);

  void* data() { return staged_ ? buffer_.data() : view_.raw(); }
  size_t bytes() const { return view_.nbytes(); }
  bool staged() const { return staged_; }
  // For outputs: copies the host buffer back to the device view (no-op for host views).
  Status finish();

 private:
  TensorView view_;
  bool staged_ = false;
  Stream stream_;
  std::vector<unsigned char> buffer_;
};

}  // namespace moe::comm
