// The Local backend: R ranks as threads of one process over shared host memory (leveldb's
// in-memory Env for communicators). CPU-only CI runs every multi-rank test on it.
//
// How it works: each collective is a rendezvous. Every rank posts a description of its call
// (pointers to its buffers, sizes, plan), waits until all ranks of the group have posted, then
// reads its peers' inputs directly and writes only its own output, and finally waits until every
// rank has finished reading before it returns (so no input is modified or freed while a peer
// still reads it). Data is moved as bytes, so every dtype works.
//
// Contract beyond communicator.h:
// - Threads: one Communicator per rank, used by one thread at a time; abort() and
//   poll_async_error() may be called from any thread.
// - Memory: host views only (memory_space() == kHost); device views give kInvalidArgument.
//   `stream` is ignored.
// - Reductions (all_reduce, reduce_scatter) are deterministic: sum in rank order
//   (((x0 + x1) + x2) + ...), so results are bit-identical run to run. f32/f64/integers
//   accumulate in their own type (integers wrap); bf16 accumulates in f32 and rounds once.
// - Consistent errors: argument checks run on every rank and the outcome is shared, so if one
//   rank passes bad arguments every rank returns an error (the bad rank kInvalidArgument, its
//   peers kInvalidArgument naming it) instead of hanging. A mismatched call (rank 0 in
//   all_reduce, rank 1 in broadcast) gives kInvalidArgument on every rank. Plans of
//   all_to_all_v are checked against each other.
// - Timeouts: every wait is bounded by LocalOptions::timeout_seconds. A wait that expires
//   returns kUnavailable naming the ranks (group rank and world rank) that did not arrive, and
//   marks the group broken: every later call on any rank of that group returns kUnavailable.
// - abort(reason) on any rank aborts the whole world created by create_world, including every
//   group split from it (like MPI_Abort): waiting and future calls on every rank return
//   kAborted with the reason and the aborting world rank.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace moe::comm {

struct LocalOptions {
  // Bound on every wait inside a collective, in seconds.
  double timeout_seconds = 300.0;
};

namespace detail {
struct LocalUniverse;
struct LocalGroup;
struct LocalPost;
}  // namespace detail

class LocalCommunicator final : public Communicator {
 public:
  // Creates the `world_size` rank communicators of one world; element r is rank r. Hand each to
  // its own thread. world_size must be >= 1 (MOE_CHECK).
  static std::vector<std::unique_ptr<Communicator>> create_world(int world_size,
                                                                 LocalOptions opts = {});
  ~LocalCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override;
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  const char* backend_name() const override { return "local"; }
  bool ranks_are_threads() const override { return true; }

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
  // color < 0 (MPI_UNDEFINED): this rank joins no group and receives a null pointer.
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override;
  void set_timeout(double seconds) override;
  Status poll_async_error() override;
  Status abort(const std::string& reason) override;

  // This rank's index in the world that create_world built (equals rank() for the world itself).
  int world_rank() const { return world_rank_; }

 private:
  LocalCommunicator(std::shared_ptr<detail::LocalGroup> group, int rank, int world_rank);

  // One collective: posts `post`, waits for every rank, runs `body` over all posts (which reads
  // peers' inputs and writes this rank's output), waits until every rank has finished `body`,
  // then runs `after` (which may overwrite this rank's input, e.g. an in-place all_reduce).
  Status collective(detail::LocalPost post,
                    const std::function<Status(const std::vector<detail::LocalPost>&)>& body,
                    const std::function<void()>& after = nullptr);

  std::shared_ptr<detail::LocalGroup> group_;
  int rank_;
  int world_rank_;
  int64_t sequence_ = 0;  // collectives this rank has entered on group_
};

// Runs fn(comm) for every rank of a fresh Local world, one thread per rank, and returns OK or the
// first failure (in time) prefixed with "rank r". When a rank's fn fails, the world is aborted so
// its peers stop waiting instead of running into the timeout.
Status run_local_ranks(int world_size, const std::function<Status(Communicator&)>& fn,
                       LocalOptions opts = {});

}  // namespace moe::comm
