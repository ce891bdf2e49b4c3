#include "comm/host_staging.h"

#include "core/base/check.h"

#if defined(MOE_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace moe::comm {

Status synchronize_stream(Stream stream) {
#if defined(MOE_WITH_CUDA)
  return MOE_CUDA_STATUS(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)));
#else
  return Status::OK();
#endif
}

StatusOr<HostStage> HostStage::input(const TensorView& view, Stream stream) {
  HostStage stage;
  stage.view_ = view;
  if (view.is_host()) return stage;
  MOE_RETURN_IF_ERROR(synchronize_stream(stream));
  stage.staged_ = true;
  stage.buffer_.resize(view.nbytes());
  MOE_RETURN_IF_ERROR(device_memcpy(stage.buffer_.data(), Device::host(), view.raw(),
                                    view.device(), view.nbytes()));
  return stage;
}

StatusOr<HostStage> HostStage::output(const TensorView& view, Stream stream) {
  return input(view, stream);  // same copy-in; finish() adds the copy-out
}

Status HostStage::finish() {
  if (!staged_) return Status::OK();
  MOE_RETURN_IF_ERROR(device_memcpy(view_.raw(), view_.device(), buffer_.data(), Device::host(),
                                    view_.nbytes()));
#if defined(MOE_WITH_CUDA)
  // cudaMemcpy from pageable memory may return before the DMA lands.
  MOE_RETURN_IF_ERROR(MOE_CUDA_STATUS(cudaDeviceSynchronize()));
#endif
  return Status::OK();
}

}  // namespace moe::comm
