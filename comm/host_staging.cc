#include "comm/host_staging.h"

#include "base/check.h"

namespace moe::comm {

StatusOr<HostStage> HostStage::input(const TensorView& view, Stream stream) {
  HostStage stage;
  stage.view_ = view;
  if (view.is_host()) return stage;
  stage.staged_ = true;
  stage.stream_ = stream;
  stage.buffer_.resize(view.nbytes());
  // The copy is ordered after the producer's work on `stream`; wait for it to land.
  MOE_RETURN_IF_ERROR(device_memcpy(stage.buffer_.data(), Device::host(), view.raw(), view.device(),
                                    view.nbytes(), stream));
  MOE_RETURN_IF_ERROR(stream_synchronize(view.device(), stream));
  return stage;
}

StatusOr<HostStage> HostStage::output(const TensorView& view, Stream stream) {
  return input(view, stream);  // same copy-in; finish() adds the copy-out
}

Status HostStage::finish() {
  if (!staged_) return Status::OK();
  MOE_RETURN_IF_ERROR(device_memcpy(view_.raw(), view_.device(), buffer_.data(), Device::host(),
                                    view_.nbytes(), stream_));
  // The host buffer is freed with this stage: the copy must have read it.
  return stream_synchronize(view_.device(), stream_);
}

}  // namespace moe::comm
