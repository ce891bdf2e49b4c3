#include "base/context.h"

#include "base/check.h"
#include "base/stream_graph.h"

#if defined(MOE_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "base/cublas_library.h"
#endif

namespace moe {

std::unique_ptr<Context> Context::host(const ContextOptions& options) {
  std::unique_ptr<Context> ctx(new Context());
  ctx->device_ = Device::host();
  ctx->allocator_ = make_host_caching_allocator(options.host_cache_limit_bytes);
  ctx->guarded_ = options.guard_host_access;
  ctx->pool_ = std::make_unique<ThreadPool>(
      options.threads > 0 ? options.threads : available_cores(), options.fine_grained_parallelism);
  return ctx;
}

StatusOr<std::unique_ptr<Context>> Context::cuda(int device, const ContextOptions& options) {
  (void)options;  // the host options have no CUDA meaning
#if defined(MOE_WITH_CUDA)
  const int count = cuda_device_count();
  if (device < 0 || device >= count) {
    return failed_precondition_error("cuda:", device, " is not available (",
                                     cuda_unavailable_reason(),
                                     "; check CUDA_VISIBLE_DEVICES and the driver)");
  }
  MOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  std::unique_ptr<Context> ctx(new Context());
  ctx->device_ = Device::cuda(device);
  MOE_ASSIGN_OR_RETURN(ctx->stream_, create_stream(device));
  const Stream stream = ctx->stream_;
  ctx->stream_owner_ = std::shared_ptr<const void>(stream.handle, [stream, device](const void*) {
    CudaDeviceGuard on_device(Device::cuda(device));
    destroy_stream(stream);
  });
  MOE_ASSIGN_OR_RETURN(ctx->allocator_, make_cuda_pool_allocator(device));
  MOE_ASSIGN_OR_RETURN(const CublasApi* blas, load_cublas());
  cublasHandle_t handle = nullptr;
  MOE_CUBLAS_RETURN_IF_ERROR(blas->create(&handle));
  ctx->blas_handle_ = handle;
  MOE_CUBLAS_RETURN_IF_ERROR(
      blas->set_stream(handle, static_cast<cudaStream_t>(ctx->stream_.handle)));
  // cuBLAS's workspace, made here (after set_stream, which resets it): the one cuBLAS makes for
  // itself when first needed is a cudaMalloc, which a stream captured into a CUDA graph cannot
  // hold (cuBLAS's advice for graphs). 32 MiB, cuBLAS's size for Hopper.
  if (const cudaError_t err = cudaMalloc(&ctx->blas_workspace_, kCublasWorkspaceBytes);
      err != cudaSuccess) {
    cudaGetLastError();  // not the next launch's error
    ctx->blas_workspace_ = nullptr;
    return resource_exhausted_error("cuda:", device, ": cuBLAS's workspace (",
                                    kCublasWorkspaceBytes >> 20,
                                    " MiB) cannot be allocated: ", cudaGetErrorString(err));
  }
  MOE_CUBLAS_RETURN_IF_ERROR(
      blas->set_workspace(handle, ctx->blas_workspace_, kCublasWorkspaceBytes));
  ctx->guarded_ = true;  // device memory: host access is never allowed
  return ctx;
#else
  return unimplemented_error("a CUDA context on cuda:", device, ": ", cuda_unavailable_reason());
#endif
}

Context::~Context() {
#if defined(MOE_WITH_CUDA)
  if (device_.is_cuda()) {
    CudaDeviceGuard on_device(device_);
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_.handle));
    if (blas_handle_ != nullptr) cublas().destroy(static_cast<cublasHandle_t>(blas_handle_));
    if (blas_workspace_ != nullptr) cudaFree(blas_workspace_);
  }
#endif
  // stream_owner_ destroys the stream once tensors still holding it have been freed.
}

StatusOr<Tensor> Context::empty(Shape shape, DType dtype) {
  return Tensor::allocate(shape, dtype, allocator_, stream_, guarded_, stream_owner_);
}

StatusOr<Tensor> Context::zeros(Shape shape, DType dtype) {
  MOE_ASSIGN_OR_RETURN(Tensor t, empty(shape, dtype));
  MOE_RETURN_IF_ERROR(zero(t));
  return t;
}

StatusOr<Tensor> Context::empty_like(const TensorView& like) {
  return empty(like.shape(), like.dtype());
}

Status Context::check_mine(const char* op, const TensorView& t) const {
  if (t.device() != device_ || (device_.is_host() && guarded_ && !t.guarded())) {
    return invalid_argument_error(
        "context ", op, ": ", t.to_string(), " is not memory of this ", device_.to_string(),
        " context",
        device_.is_host() && guarded_ ? " (reading device data on the host is a read_back)" : "");
  }
  return Status::OK();
}

Status Context::copy(const TensorView& src, const TensorView& dst) {
  if (src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
    return invalid_argument_error("context copy: ", src.to_string(), " -> ", dst.to_string(),
                                  " (shapes and dtypes must match)");
  }
  MOE_RETURN_IF_ERROR(check_mine("copy", dst));
  if (!src.is_host()) MOE_RETURN_IF_ERROR(check_mine("copy", src));
  DeviceAccessScope device_side;
  CudaDeviceGuard on_device(device_);
  const Status s =
      device_memcpy(dst.raw(), dst.device(), src.raw(), src.device(), src.nbytes(), stream_);
  note_captured("copy");
  return s;
}

Status Context::zero(const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_mine("zero", t));
  DeviceAccessScope device_side;
  CudaDeviceGuard on_device(device_);
  const Status s = device_memset_zero(t.raw(), t.device(), t.nbytes(), stream_);
  note_captured("zero");
  return s;
}

StatusOr<Tensor> Context::upload(const TensorView& host) {
  MOE_ASSIGN_OR_RETURN(Tensor t, empty_like(host));
  MOE_RETURN_IF_ERROR(copy(host, t));
  return t;
}

StatusOr<Tensor> Context::clone(const TensorView& src) { return upload(src); }

StatusOr<Tensor> Context::staging(Shape shape, DType dtype) {
  if (device_.is_host()) return Tensor::try_empty(shape, dtype);
  if (staging_allocator_ == nullptr) {
    MOE_ASSIGN_OR_RETURN(staging_allocator_, make_pinned_host_allocator());
  }
  return Tensor::allocate(shape, dtype, staging_allocator_);
}

Status Context::synchronize() {
  if (capturing_) {
    return failed_precondition_error(
        "a wait for ", device_.to_string(),
        " while its stream is captured into a CUDA graph (captured work runs later, when the "
        "graph is replayed: it cannot wait for itself)");
  }
  ++sync_count_;
  CudaDeviceGuard on_device(device_);
  return stream_synchronize(device_, stream_);
}

StatusOr<Tensor> Context::read_back(const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_mine("read_back", t));
  MOE_RETURN_IF_ERROR(synchronize());  // refused while capturing
  MOE_ASSIGN_OR_RETURN(Tensor host, Tensor::try_empty(t.shape(), t.dtype()));
  DeviceAccessScope device_side;
  CudaDeviceGuard on_device(device_);
  MOE_RETURN_IF_ERROR(
      device_memcpy(host.raw(), Device::host(), t.raw(), t.device(), t.nbytes(), stream_));
  MOE_RETURN_IF_ERROR(stream_synchronize(device_, stream_));
  return host;
}

}  // namespace moe
