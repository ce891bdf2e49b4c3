// The MPI backend (built when MOE_WITH_MPI): host buffers; device views are staged through host
// copies. Serves multi-process runs on CPUs and is the host bootstrap of the NCCL backend. This
// header does not include <mpi.h>: MPI is a private dependency of moe_comm.
//
// Contract beyond communicator.h:
// - Lifetime: an MpiRuntime must be alive (MPI initialised, not finalised) while any
//   MpiCommunicator exists or is destroyed. Each communicator owns its own MPI communicator (a
//   duplicate of MPI_COMM_WORLD, or the result of MPI_Comm_split) with MPI_ERRORS_RETURN, so MPI
//   errors come back as Status (kInternal, "mpi: <call>: <MPI error string>").
// - Threads: one thread at a time per communicator (with MpiThreadLevel::kMultiple, different
//   communicators may be used from different threads).
// - Bounded waits: every collective is started nonblocking (MPI_Iallreduce, MPI_Ialltoallv, ...)
//   and polled until the timeout (MpiOptions::timeout_seconds, set_timeout); past it the ranks
//   that time out exchange notes over a private duplicate communicator for up to 10 s, and the
//   call returns kUnavailable naming the world ranks that did not arrive ("rank 0:
//   all_reduce (collective #812) timed out after 30 s: rank(s) 2 did not arrive; rank(s) 1
//   waited too"). The communicator is then broken: later calls return kUnavailable and the
//   caller is expected to abort(). split() is guarded by a bounded barrier before the
//   (blocking) MPI_Comm_split.
// - Argument errors are local (kInvalidArgument on the rank that passed them); its peers then
//   run into the timeout. Plans of all_to_all_v are not cross-checked (a mismatch gives an MPI
//   truncation error or wrong data).
// - Reductions in rank order, as the Local backend's (communicator.h): a floating-point sum of
//   all_reduce is a reduce-scatter (MPI_Ialltoall of equal chunks, segment by segment through a
//   receive buffer of at most 32 MiB that the communicator keeps, each rank combining what it
//   receives with comm/host_reduce.h) and an in-place MPI_Iallgather, never MPI_SUM, whose order
//   MPI leaves to the library; the last world_size - 1 elements at most are gathered whole and
//   summed on every rank. reduce_scatter is the first half. Integer sums, max and min (exact in
//   any order) use MPI_Iallreduce, bf16 max/min through user-defined operators.
// - Large messages: counts above MpiOptions::max_count (INT_MAX) travel as contiguous derived
//   datatypes (whole buffers, the chunks of reduce_scatter and of all_reduce's sums, rows of
//   all_to_all_v, padded gather_bytes blocks) or in chunks (all_reduce's other reductions).
//   all_to_all_v row counts and row offsets must fit max_count (else
//   kInvalidArgument naming the count).
// - abort() prints the reason to stderr and calls MPI_Abort(comm, 1), which ends the job.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace moe::comm {

enum class MpiThreadLevel { kSingle, kFunneled, kSerialized, kMultiple };

// RAII owner of MPI's lifetime: MPI_Init_thread on creation unless MPI is already initialised
// (then it does nothing and leaves finalisation to whoever initialised it), MPI_Finalize on
// destruction if it initialised MPI. Create one per process, before any MpiCommunicator.
class MpiRuntime {
 public:
  // argc/argv may be null. kFailedPrecondition if MPI was already finalised; kInternal if MPI
  // provides a lower thread level than `required`.
  static StatusOr<std::unique_ptr<MpiRuntime>> init(
      int* argc, char*** argv, MpiThreadLevel required = MpiThreadLevel::kSerialized);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  bool owns_mpi() const { return owns_; }  // this object will call MPI_Finalize
  MpiThreadLevel provided() const { return provided_; }
  int world_rank() const { return world_rank_; }  // in MPI_COMM_WORLD
  int world_size() const { return world_size_; }

 private:
  MpiRuntime() = default;
  bool owns_ = false;
  MpiThreadLevel provided_ = MpiThreadLevel::kSingle;
  int world_rank_ = 0;
  int world_size_ = 1;
};

struct MpiOptions {
  // Bound on every wait inside a collective, in seconds.
  double timeout_seconds = 300.0;
  // Largest count handed to one MPI call (MPI counts are int). Tests lower it to exercise the
  // derived-datatype and chunking paths with small buffers. Must be >= 1.
  int64_t max_count = INT_MAX;
};

class MpiCommunicator final : public Communicator {
 public:
  // Collective over MPI_COMM_WORLD: a fresh duplicate of it. kFailedPrecondition if MPI is not
  // initialised or already finalised; kInvalidArgument for bad options.
  static StatusOr<std::unique_ptr<Communicator>> create_world(MpiOptions opts = {});
  ~MpiCommunicator() override;

  int rank() const override;
  int world_size() const override;
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  const char* backend_name() const override { return "mpi"; }

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
  // MPI_Comm_split; color < 0 is MPI_UNDEFINED: this rank joins no group and receives null.
  // The new communicator inherits this one's options.
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override;
  // kUnavailable once a wait has timed out; OK otherwise.
  void set_timeout(double seconds) override;
  Status poll_async_error() override;
  // Does not return when MPI_Abort ends the process, as it normally does.
  Status abort(const std::string& reason) override;

  struct Impl;  // MPI handles; defined in mpi_communicator.cc

 private:
  explicit MpiCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace moe::comm
