// The NCCL backend (built when MOE_WITH_NCCL): device buffers, one CUDA device per rank. Data
// collectives run on NCCL; host-side control (barrier, gather_bytes, broadcast_bytes, the
// unique-id exchange at creation) runs on a host "bootstrap" communicator (MPI or Local) that
// this communicator owns. This header does not include <nccl.h>.
//
// Contract beyond communicator.h:
// - Memory: data views are on a CUDA device (memory_space() == kDevice), normally this rank's
//   device. Views that are all on the host (small control data: counts, flags, statistics) go
//   through the bootstrap communicator instead, synchronously; a host view mixed with a device
//   view is kInvalidArgument.
// - Stream-ordered: data collectives are enqueued on `stream` (a cudaStream_t; null is the
//   default stream) and return before the data lands; synchronize the stream to read results.
//   all_to_all(_v) is one ncclGroupStart / ncclSend+ncclRecv per peer / ncclGroupEnd.
// - barrier() synchronizes the host threads only (through the bootstrap); it does not order
//   device work. gather_bytes/broadcast_bytes are host strings, through the bootstrap.
// - Errors: argument errors are local (kInvalidArgument; peers may then block in NCCL, so the
//   caller must abort()). NCCL errors give kInternal ("nccl: ..."); asynchronous ones
//   (including a lost peer, kUnavailable) are reported by poll_async_error(). NCCL waits are not
//   bounded by a timeout: a watchdog should poll_async_error() and abort().
// - Reductions: NCCL's order, deterministic for a fixed topology and size but not rank order
//   (communicator.h: all_reduce and reduce_scatter agree up to 2 ranks).
// - abort(): ncclCommAbort, then abort() on the bootstrap (with MPI, that ends the job), so no
//   peer keeps waiting. Later calls return kAborted.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace moe::comm {

struct NcclOptions {
  // CUDA device of this rank; -1 picks the node-local rank's (choose_cuda_device: the launcher's
  // local rank, else the bootstrap rank, modulo the visible devices).
  int device = -1;
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (owned from now on; rank r of the bootstrap becomes NCCL rank
  // r): selects the device, exchanges the unique id through bootstrap.broadcast_bytes, then
  // ncclCommInitRank. kFailedPrecondition without a CUDA device.
  static StatusOr<std::unique_ptr<Communicator>> create(std::unique_ptr<Communicator> bootstrap,
                                                        NcclOptions opts = {});
  ~NcclCommunicator() override;

  int rank() const override;
  int world_size() const override;
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  const char* backend_name() const override { return "nccl"; }
  bool reduce_scatter_matches_all_reduce() const override { return world_size() <= 2; }

  Status all_reduce(const TensorView& in, const TensorView& out, ReduceOp op,
                    Stream stream = {}) override;
  Status all_gather(const TensorView& in, const TensorView& out, Stream stream = {}) override;
  Status reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                        Stream stream = {}) override;
  Status broadcast(const TensorView& buf, int root, Stream stream = {}) override;
  Status all_to_all(const TensorView& in, const TensorView& out, Stream stream = {}) override;
  Status all_to_all_v(const TensorView& in, const AllToAllPlan& plan, const TensorView& out,
                      Stream stream = {}) override;
  Status barrier() override;
  StatusOr<std::vector<std::string>> gather_bytes(const std::string& mine, int root) override;
  StatusOr<std::string> broadcast_bytes(const std::string& value, int root) override;
  // Splits the bootstrap and the NCCL communicator (ncclCommSplit) alike; color < 0 gives null.
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override;
  // ncclCommGetAsyncError, then the bootstrap's poll_async_error().
  // The bootstrap's timeout (NCCL device operations are not bounded by it).
  void set_timeout(double seconds) override;
  Status poll_async_error() override;
  Status abort(const std::string& reason) override;
  // ncclCommGetAsyncError / ncclCommAbort only (not the bootstrap), under a lock shared with
  // every call's entry check: safe from a watchdog thread.
  Status poll_device_error() override;
  void abort_device(const std::string& reason) override;

  int device() const;

  struct Impl;  // NCCL handles; defined in nccl_communicator.cc

 private:
  explicit NcclCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe::comm
