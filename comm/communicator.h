// The one communication interface, and the only comm header core/ includes (no <mpi.h>,
// <nccl.h>). Backends: Local (ranks as threads of one process, host memory; for tests), MPI (host
// buffers; device data staged through the host), NCCL (device buffers).
//
// Semantics, written once for every backend:
// - Every method is collective over the communicator unless marked local: all ranks call the same
//   methods in the same order with matching shapes and dtypes.
// - Views must live in memory_space(): host for Local/MPI, device for NCCL. Counts are in rows of
//   dimension 0 (all_to_all_v) or in whole views.
// - Stream-ordered: device backends enqueue on `stream`; host backends return when data landed.
// - `in` and `out` may alias only where noted.
// - Reductions (all_reduce, reduce_scatter): the host backends (Local, MPI) combine every
//   element in rank order, (((x0 op x1) op x2) ...), bf16 in f32 rounded once (comm/host_reduce.h),
//   so a result is the same bits run to run, on either host backend, and from all_reduce as from
//   reduce_scatter. NCCL reduces in its own order (deterministic for a fixed job and size): its
//   all_reduce and reduce_scatter agree up to 2 ranks (one addition, a + b = b + a), not beyond.
// - Errors: a failed or lost peer gives kUnavailable (naming the rank when known); a call after
//   abort() gives kAborted. Errors never hang: host backends bound every wait (see the backend's
//   timeout) and report which rank did not arrive.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/tensor.h"
#include "comm/all_to_all_plan.h"

namespace moe::comm {

enum class ReduceOp { kSum, kMax, kMin };
enum class MemorySpace { kHost, kDevice };

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Local queries.
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual MemorySpace memory_space() const = 0;
  virtual const char* backend_name() const = 0;
  // Whether the ranks are threads of this process (they then share its cores).
  virtual bool ranks_are_threads() const { return false; }
  // Whether reduce_scatter sums each element as all_reduce does, bit for bit (see Reductions
  // above): the host backends always, NCCL up to 2 ranks.
  virtual bool reduce_scatter_matches_all_reduce() const { return true; }

  // out = op over ranks of in (elementwise). Same shape/dtype; out may alias in.
  virtual Status all_reduce(const TensorView& in, const TensorView& out, ReduceOp op,
                            Stream stream = {}) = 0;
  // out [world_size * in.numel()] (any shape with that many elements) = concatenation by rank.
  // In place: in may be out's own chunk (in.raw() == out.raw() + rank() * in.nbytes()), which
  // then stays as it is; no other overlap.
  virtual Status all_gather(const TensorView& in, const TensorView& out, Stream stream = {}) = 0;
  // The dual of all_gather: in [world_size * k elements] is cut into world_size chunks of k in
  // rank order, and out [k elements] = op over ranks of chunk rank() (any shapes with those
  // counts; one dtype). In place: out may be in's own chunk (out.raw() == in.raw() + rank() *
  // out.nbytes()), and the rest of in is left as it was; no other overlap.
  virtual Status reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                                Stream stream = {}) = 0;
  // buf on every rank = buf on root.
  virtual Status broadcast(const TensorView& buf, int root, Stream stream = {}) = 0;
  // Equal chunks: in and out are [world_size * k, ...] (usually k = 1: [R, E_l, C, D]); chunk r
  // (rows [r*k, (r+1)*k)) of in goes to rank r and arrives as chunk `rank()` of out on rank r.
  // No aliasing.
  virtual Status all_to_all(const TensorView& in, const TensorView& out, Stream stream = {}) = 0;
  // Varying counts: in is [plan.send_total, ...], out is [plan.recv_total, ...], rows per plan.
  // Plans must agree (my send_counts[r] == rank r's recv_counts[me]). No aliasing. Rows outside
  // every range are neither read nor written (a plan's without(rank()) leaves my own rows alone).
  virtual Status all_to_all_v(const TensorView& in, const AllToAllPlan& plan, const TensorView& out,
                              Stream stream = {}) = 0;
  virtual Status barrier() = 0;

  // Variable-length host byte strings (serialized protobuf): root receives every rank's string in
  // rank order; other ranks receive an empty vector.
  virtual StatusOr<std::vector<std::string>> gather_bytes(const std::string& mine, int root) = 0;
  // Root's string on every rank.
  virtual StatusOr<std::string> broadcast_bytes(const std::string& value, int root) = 0;

  // A sub-communicator of the ranks that pass the same color, ordered by key, ties by rank
  // (MPI_Comm_split). color < 0 (MPI_UNDEFINED): this rank joins no group and gets nullptr.
  // The result is independent of its parent (it may outlive it).
  virtual StatusOr<std::unique_ptr<Communicator>> split(int color, int key) = 0;

  // Local: the bound on every later wait of this communicator, in seconds (> 0). The trainer
  // uses a long bound while the job starts and checkpoints, a short one while it trains.
  virtual void set_timeout(double seconds) = 0;
  // Local: reports an error raised asynchronously (e.g. NCCL's async error, a peer's abort).
  virtual Status poll_async_error() = 0;
  // Local: tears the communicator down so that peers stop waiting; later calls fail with kAborted.
  // Used by the launcher on fatal errors.
  virtual Status abort(const std::string& reason) = 0;

  // For a watchdog thread (comm/watchdog.h), callable from any thread while collectives run on
  // another: the device library's asynchronous error (NCCL's), and aborting the device
  // communicator so that a wait blocked on it returns (the thread running the collectives then
  // fails and calls abort()). Host backends have neither: OK and a no-op.
  virtual Status poll_device_error() { return Status::OK(); }
  virtual void abort_device(const std::string& reason) { static_cast<void>(reason); }

 protected:
  Communicator() = default;
};

}  // namespace moe::comm
