#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <initializer_list>
#include <mutex>

#include "base/check.h"
#include "comm/bootstrap.h"
#include "comm/view_util.h"

namespace moe::comm {
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    case DType::kU8:
      return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

cudaStream_t cuda_stream(Stream stream) { return static_cast<cudaStream_t>(stream.handle); }

Status check_device_view(const char* op, const char* what, const TensorView& v) {
  if (!v.device().is_cuda()) {
    return invalid_argument_error(op, ": ", what, " is ", v.to_string(),
                                  " but the other view is device memory (both on the host, or both "
                                  "on the device)");
  }
  if (!v.defined()) return invalid_argument_error(op, ": ", what, " has no data");
  return Status::OK();
}

// Host views are small control data (counts, flags, statistics): they go through the bootstrap.
bool all_host(std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views)
    if (!v->is_host()) return false;
  return true;
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  int device = 0;
  int rank = 0;
  int size = 1;
  std::unique_ptr<Communicator> bootstrap;
  // Guards `comm` and `aborted` against a watchdog thread's abort_device.
  std::mutex mu;
  std::string aborted;  // non-empty after abort(): the message later calls return

  ~Impl() {
    if (comm != nullptr) {
      cudaSetDevice(device);
      ncclCommDestroy(comm);
    }
  }

  // Entry check of every call: not aborted, device selected. Returns the communicator as read
  // under the lock: a collective uses this copy and never reads `comm` again, which a watchdog's
  // abort_comm may null meanwhile (the same snapshot PyTorch's NCCL watchdog relies on;
  // ncclCommAbort is NCCL's way to release a call blocked on the communicator). A race of this kind
  // is invisible on the CPU: compute-sanitizer and the NCCL stage of tests/run_gpu.sh exercise it.
  StatusOr<ncclComm_t> enter() {
    ncclComm_t c = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!aborted.empty()) return aborted_error(aborted);
      c = comm;
    }
    MOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    return c;
  }

  // OK, or the abort's message (read under the lock: the watchdog thread writes it).
  Status not_aborted() {
    std::lock_guard<std::mutex> lock(mu);
    return aborted.empty() ? Status::OK() : aborted_error(aborted);
  }

  // Aborts the NCCL communicator once (ncclCommAbort releases operations blocked on it).
  void abort_comm(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (!aborted.empty()) return;
    aborted = why;
    if (comm != nullptr) {
      cudaSetDevice(device);
      ncclCommAbort(comm);
      comm = nullptr;
    }
  }

  // ncclCommGetAsyncError as a Status.
  Status device_error() {
    std::lock_guard<std::mutex> lock(mu);
    if (!aborted.empty()) return aborted_error(aborted);
    ncclResult_t state = ncclSuccess;
    MOE_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &state));
    if (state == ncclRemoteError || state == ncclSystemError) {
      return unavailable_error("nccl: rank ", rank, ": asynchronous error ",
                               ncclGetErrorString(state), " (", ncclGetLastError(comm),
                               "); a peer may have died");
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      return internal_error("nccl: rank ", rank, ": asynchronous error ", ncclGetErrorString(state),
                            " (", ncclGetLastError(comm), ")");
    }
    return Status::OK();
  }

  // Runs `body` between ncclGroupStart and ncclGroupEnd; ncclGroupEnd runs even if body fails.
  template <typename Body>
  Status group(Body&& body) {
    MOE_NCCL_RETURN_IF_ERROR(ncclGroupStart());
    Status status = body();
    Status end = MOE_NCCL_STATUS(ncclGroupEnd());
    return status.ok() ? end : status;
  }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::world_size() const { return impl_->size; }
int NcclCommunicator::device() const { return impl_->device; }

StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::create(
    std::unique_ptr<Communicator> bootstrap, NcclOptions opts) {
  if (!bootstrap) return invalid_argument_error("nccl: no bootstrap communicator");
  const int count = cuda_device_count();
  if (count == 0) {
    return failed_precondition_error("nccl: no CUDA device is usable (", cuda_unavailable_reason(),
                                     ")");
  }
  auto impl = std::make_unique<Impl>();
  impl->rank = bootstrap->rank();
  impl->size = bootstrap->world_size();
  if (opts.device >= 0) {
    impl->device = opts.device;
  } else {
    MOE_ASSIGN_OR_RETURN(impl->device, choose_cuda_device(impl->rank));
  }
  if (impl->device >= count) {
    return invalid_argument_error("nccl: device ", impl->device, " of ", count, " visible");
  }
  MOE_CUDA_RETURN_IF_ERROR(cudaSetDevice(impl->device));
  auto make_id = []() -> StatusOr<std::string> {
    ncclUniqueId id;
    MOE_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
  };
  MOE_ASSIGN_OR_RETURN(std::string id_bytes,
                       broadcast_unique_id(*bootstrap, make_id, sizeof(ncclUniqueId)));
  ncclUniqueId id;
  std::memcpy(&id, id_bytes.data(), sizeof(id));
  MOE_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&impl->comm, impl->size, id, impl->rank));
  impl->bootstrap = std::move(bootstrap);
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(impl)));
}

Status NcclCommunicator::all_reduce(const TensorView& in, const TensorView& out, ReduceOp op,
                                    Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->enter());
  if (all_host({&in, &out})) return impl_->bootstrap->all_reduce(in, out, op);
  MOE_RETURN_IF_ERROR(check_device_view("all_reduce", "in", in));
  MOE_RETURN_IF_ERROR(check_device_view("all_reduce", "out", out));
  if (in.dtype() != out.dtype() || in.numel() != out.numel()) {
    return invalid_argument_error("all_reduce: in ", in.to_string(), " and out ", out.to_string(),
                                  " differ in dtype or element count");
  }
  if (in.raw() != out.raw() && overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    return invalid_argument_error("all_reduce: in and out overlap without being the same buffer");
  }
  return MOE_NCCL_STATUS(ncclAllReduce(in.raw(), out.raw(), static_cast<size_t>(in.numel()),
                                       nccl_type(in.dtype()), nccl_op(op), comm,
                                       cuda_stream(stream)));
}

Status NcclCommunicator::all_gather(const TensorView& in, const TensorView& out, Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->enter());
  if (all_host({&in, &out})) return impl_->bootstrap->all_gather(in, out);
  MOE_RETURN_IF_ERROR(check_device_view("all_gather", "in", in));
  MOE_RETURN_IF_ERROR(check_device_view("all_gather", "out", out));
  // NCCL's in-place all-gather is exactly communicator.h's: in is out's own chunk.
  const std::string bad = chunked_args_error(in, "in", out, "out", impl_->size, impl_->rank);
  if (!bad.empty()) return invalid_argument_error("all_gather: ", bad);
  return MOE_NCCL_STATUS(
      ncclAllGather(in.raw(), out.raw(), in.nbytes(), ncclUint8, comm, cuda_stream(stream)));
}

Status NcclCommunicator::reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                                        Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->enter());
  if (all_host({&in, &out})) return impl_->bootstrap->reduce_scatter(in, out, op);
  MOE_RETURN_IF_ERROR(check_device_view("reduce_scatter", "in", in));
  MOE_RETURN_IF_ERROR(check_device_view("reduce_scatter", "out", out));
  // NCCL's in-place reduce-scatter is exactly communicator.h's: out is in's own chunk.
  const std::string bad = chunked_args_error(out, "out", in, "in", impl_->size, impl_->rank);
  if (!bad.empty()) return invalid_argument_error("reduce_scatter: ", bad);
  return MOE_NCCL_STATUS(ncclReduceScatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()),
                                           nccl_type(in.dtype()), nccl_op(op), comm,
                                           cuda_stream(stream)));
}

Status NcclCommunicator::broadcast(const TensorView& buf, int root, Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->enter());
  if (buf.is_host()) return impl_->bootstrap->broadcast(buf, root);
  MOE_RETURN_IF_ERROR(check_device_view("broadcast", "buf", buf));
  if (root < 0 || root >= impl_->size) {
    return invalid_argument_error("broadcast: root ", root, " is not a rank of a world of ",
                                  impl_->size);
  }
  return MOE_NCCL_STATUS(ncclBroadcast(buf.raw(), buf.raw(), buf.nbytes(), ncclUint8, root, comm,
                                       cuda_stream(stream)));
}

Status NcclCommunicator::all_to_all(const TensorView& in, const TensorView& out, Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->enter());
  if (all_host({&in, &out})) return impl_->bootstrap->all_to_all(in, out);
  MOE_RETURN_IF_ERROR(check_device_view("all_to_all", "in", in));
  MOE_RETURN_IF_ERROR(check_device_view("all_to_all", "out", out));
  const int n = impl_->size;
  if (in.ndim() < 1 || out.ndim() < 1 || in.dim(0) % n != 0 || in.dtype() != out.dtype() ||
      in.numel() != out.numel()) {
    return invalid_argument_error("all_to_all: in ", in.to_string(), " and out ", out.to_string(),
                                  " must be equal [world_size ", n,
                                  " * k, ...] views of one dtype");
  }
  if (overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    return invalid_argument_error("all_to_all: in and out overlap");
  }
  const size_t chunk = in.nbytes() / n;
  return impl_->group([&]() -> Status {
    for (int r = 0; r < n; ++r) {
      MOE_NCCL_RETURN_IF_ERROR(ncclSend(static_cast<const char*>(in.raw()) + r * chunk, chunk,
                                        ncclUint8, r, comm, cuda_stream(stream)));
      MOE_NCCL_RETURN_IF_ERROR(ncclRecv(static_cast<char*>(out.raw()) + r * chunk, chunk, ncclUint8,
                                        r, comm, cuda_stream(stream)));
    }
    return Status::OK();
  });
}

Status NcclCommunicator::all_to_all_v(const TensorView& in, const AllToAllPlan& plan,
                                      const TensorView& out, Stream stream) {
  DeviceAccessScope device_side;  // the backend moves tensor memory
  MOE_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->enter());
  if (all_host({&in, &out})) return impl_->bootstrap->all_to_all_v(in, plan, out);
  MOE_RETURN_IF_ERROR(check_device_view("all_to_all_v", "in", in));
  MOE_RETURN_IF_ERROR(check_device_view("all_to_all_v", "out", out));
  const int n = impl_->size;
  if (plan.world_size() != n) {
    return invalid_argument_error("all_to_all_v: plan has ", plan.world_size(),
                                  " ranks, the communicator ", n);
  }
  if (in.ndim() < 1 || out.ndim() < 1 || in.dim(0) != plan.send_total ||
      out.dim(0) != plan.recv_total || in.dtype() != out.dtype() ||
      row_bytes_of(in) != row_bytes_of(out)) {
    return invalid_argument_error("all_to_all_v: in ", in.to_string(), " and out ", out.to_string(),
                                  " must be [send_total ", plan.send_total,
                                  ", ...] and [recv_total ", plan.recv_total,
                                  ", ...] with one row size and dtype");
  }
  if (overlaps(in.raw(), in.nbytes(), out.raw(), out.nbytes())) {
    return invalid_argument_error("all_to_all_v: in and out overlap");
  }
  const size_t rb = row_bytes_of(in);
  return impl_->group([&]() -> Status {
    for (int r = 0; r < n; ++r) {
      if (plan.send_counts[r] > 0) {
        MOE_NCCL_RETURN_IF_ERROR(
            ncclSend(static_cast<const char*>(in.raw()) + plan.send_offsets[r] * rb,
                     plan.send_counts[r] * rb, ncclUint8, r, comm, cuda_stream(stream)));
      }
      if (plan.recv_counts[r] > 0) {
        MOE_NCCL_RETURN_IF_ERROR(ncclRecv(static_cast<char*>(out.raw()) + plan.recv_offsets[r] * rb,
                                          plan.recv_counts[r] * rb, ncclUint8, r, comm,
                                          cuda_stream(stream)));
      }
    }
    return Status::OK();
  });
}

Status NcclCommunicator::barrier() {
  MOE_RETURN_IF_ERROR(impl_->not_aborted());
  return impl_->bootstrap->barrier();
}

StatusOr<std::vector<std::string>> NcclCommunicator::gather_bytes(const std::string& mine,
                                                                  int root) {
  MOE_RETURN_IF_ERROR(impl_->not_aborted());
  return impl_->bootstrap->gather_bytes(mine, root);
}

StatusOr<std::string> NcclCommunicator::broadcast_bytes(const std::string& value, int root) {
  MOE_RETURN_IF_ERROR(impl_->not_aborted());
  return impl_->bootstrap->broadcast_bytes(value, root);
}

StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::split(int color, int key) {
  MOE_ASSIGN_OR_RETURN(ncclComm_t comm, impl_->enter());
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub_bootstrap,
                       impl_->bootstrap->split(color, key));
  ncclComm_t sub = nullptr;
  MOE_NCCL_RETURN_IF_ERROR(
      ncclCommSplit(comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr));
  if (color < 0 || sub == nullptr) return std::unique_ptr<Communicator>();
  auto impl = std::make_unique<Impl>();
  impl->comm = sub;
  impl->device = impl_->device;
  impl->rank = sub_bootstrap->rank();
  impl->size = sub_bootstrap->world_size();
  impl->bootstrap = std::move(sub_bootstrap);
  int nccl_rank = -1;
  MOE_NCCL_RETURN_IF_ERROR(ncclCommUserRank(sub, &nccl_rank));
  if (nccl_rank != impl->rank) {
    return internal_error("nccl split: NCCL rank ", nccl_rank, " but bootstrap rank ", impl->rank);
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(impl)));
}

void NcclCommunicator::set_timeout(double seconds) { impl_->bootstrap->set_timeout(seconds); }

Status NcclCommunicator::poll_async_error() {
  MOE_RETURN_IF_ERROR(impl_->device_error());
  return impl_->bootstrap->poll_async_error();
}

Status NcclCommunicator::abort(const std::string& reason) {
  impl_->abort_comm(str_cat("aborted by rank ", impl_->rank, ": ", reason));
  return impl_->bootstrap->abort(reason);
}

Status NcclCommunicator::poll_device_error() { return impl_->device_error(); }

void NcclCommunicator::abort_device(const std::string& reason) {
  impl_->abort_comm(str_cat("aborted by rank ", impl_->rank, "'s watchdog: ", reason));
}

}  // namespace moe::comm
