// The execution context of one rank: the device it computes on, the stream its work is ordered
// on, the allocator its tensors come from, the library handles its kernels use (cuBLAS), and the
// one place core code waits for the device.
//
// Contract for core code (core/layers, core/model): allocate through the context, hand tensors to
// kernels, never read or write tensor memory on the host and never wait. The trainer waits once
// per step, through synchronize() or read_back(); both are counted (sync_count()), so a test can
// prove that a step syncs exactly where it should. A host context created with
// guard_host_access marks its tensors as device memory: host access outside a kernel aborts (see
// DeviceAccessScope in tensor.h), which is how the CPU test build stands in for a GPU.
#pragma once

#include <cstdint>
#include <memory>

#include "base/allocator.h"
#include "base/tensor.h"
#include "base/thread_pool.h"

namespace moe {

class PhaseTimer;

struct ContextOptions {
  // Host contexts: mark every tensor of this context as device memory (tests).
  bool guard_host_access = false;
  // Host contexts: the most freed memory the caching allocator keeps for reuse.
  size_t host_cache_limit_bytes = size_t{8} << 30;
  // Host contexts: the threads kernels run on (the caller plus threads - 1 workers). Results do
  // not depend on it (see base/thread_pool.h). 0: every core this process may use.
  int threads = 1;
  // Host contexts (tests): cut parallel work as finely as possible (see ThreadPool).
  bool fine_grained_parallelism = false;
};

class Context {
 public:
  // The CPU: synchronous, host memory from a caching allocator.
  static std::unique_ptr<Context> host(const ContextOptions& options = {});
  // CUDA device `device`: a non-blocking stream, a stream-ordered memory pool and a cuBLAS handle.
  // The device becomes current on the calling thread; kernel entry points make it current for
  // their launches (CudaDeviceGuard), so contexts on several devices can share a thread.
  // kUnimplemented without CUDA support, kFailedPrecondition (naming why) without that device.
  static StatusOr<std::unique_ptr<Context>> cuda(int device, const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device device() const { return device_; }
  Stream stream() const { return stream_; }
  Allocator& allocator() const { return *allocator_; }
  bool guarded() const { return guarded_; }
  // cublasHandle_t bound to stream() on CUDA, with a workspace of kCublasWorkspaceBytes made
  // with the context; nullptr on the host.
  void* blas_handle() const { return blas_handle_; }
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
  // The host's threads (kernels reach them through parallel_for); nullptr on CUDA.
  ThreadPool* thread_pool() const { return pool_.get(); }
  int threads() const { return pool_ ? pool_->threads() : 1; }

  // Tensors on this context's device, stream-ordered: uninitialised, zero-filled, or shaped like
  // `like`. kResourceExhausted (naming the size) when memory runs out.
  StatusOr<Tensor> empty(Shape shape, DType dtype);
  StatusOr<Tensor> zeros(Shape shape, DType dtype);
  StatusOr<Tensor> empty_like(const TensorView& like);

  // Stream-ordered copies (no wait). copy: same shape and dtype; src on the host or this device,
  // dst on this device (a host destination is a read back: use read_back).
  Status copy(const TensorView& src, const TensorView& dst);
  Status zero(const TensorView& t);
  // A new tensor on this device holding a host view's data, or a deep copy of a device view.
  StatusOr<Tensor> upload(const TensorView& host);
  StatusOr<Tensor> clone(const TensorView& src);
  // Host memory this device copies from without waiting: page-locked on CUDA (a copy from it is
  // asynchronous and can be recorded in a CUDA graph, which reads it when replayed), ordinary
  // host memory on the host. Unguarded: the host writes it, and must not overwrite it before the
  // copies that read it have run (after the step's sync point, for the trainer's batches).
  StatusOr<Tensor> staging(Shape shape, DType dtype);

  // The waits. synchronize() returns when all enqueued work has finished; read_back() also
  // copies a tensor of this context into a new, unguarded host tensor. Each counts as one sync.
  Status synchronize();
  StatusOr<Tensor> read_back(const TensorView& t);
  int64_t sync_count() const { return sync_count_; }
  // True while a StreamGraph records this context's stream (base/stream_graph.h): nothing runs
  // then, so synchronize() and read_back() refuse with kFailedPrecondition.
  bool capturing() const { return capturing_; }

  // The step's phase timer (base/phase_timer.h), borrowed; null when nothing is timed.
  // Deep code marks its phase with ScopedPhase(ctx, Phase::k...).
  PhaseTimer* phase_timer() const { return phase_timer_; }
  void set_phase_timer(PhaseTimer* timer) { phase_timer_ = timer; }

 private:
  friend class StreamGraph;  // sets capturing_
  Context() = default;
  Status check_mine(const char* op, const TensorView& t) const;

  Device device_;
  Stream stream_;
  // Destroys the CUDA stream when the context and every tensor allocated on it are gone.
  std::shared_ptr<const void> stream_owner_;
  std::shared_ptr<Allocator> allocator_;
  bool guarded_ = false;
  void* blas_handle_ = nullptr;
  void* blas_workspace_ = nullptr;  // cuBLAS's workspace (kCublasWorkspaceBytes), CUDA only
  std::unique_ptr<ThreadPool> pool_;
  std::shared_ptr<Allocator> staging_allocator_;  // page-locked, made on first use (CUDA)
  int64_t sync_count_ = 0;
  bool capturing_ = false;
  PhaseTimer* phase_timer_ = nullptr;
};

}  // namespace moe
