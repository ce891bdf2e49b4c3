// The hierarchical all-to-all (parallel.hierarchical_all_to_all): a Communicator over an EP group
// that spans H hosts with L ranks each, whose token exchange goes through each host instead of
// straight between every pair of ranks. Every method but the two exchanges is the flat group's.
//
// Rank (h, l) is the l-th rank (in group-rank order) of the h-th host (hosts in the order of
// their first group rank). all_to_all_v(in, plan, out) runs in three stages:
//   1. intra-host: (h, l) packs its rows by destination local rank l' (and within that by
//      destination host h') and exchanges them among the L ranks of host h: afterwards (h, l')
//      holds every row of its host bound for (h', l'), for every h';
//   2. inter-host: each (h, l') regroups them by destination host and exchanges them among the H
//      ranks with local rank l' (one message to each other host): afterwards (h', l') holds
//      every row bound for it, ordered by source (h, l);
//   3. (h', l') copies each source's rows to their place in `out` (the flat plan's offsets).
// So each pair of hosts exchanges L messages instead of the flat exchange's L x L, at the cost
// of the intra-host hop and three local copies. The result is the flat exchange's, bit for bit:
// the same rows in the same rows of `out`, and rows outside the plan's ranges untouched (the
// stages move bytes; nothing is computed).
//
// Counts: stage 1's receive counts and stage 2's send counts need the flat send counts of every
// rank of the host, which all_to_all_v exchanges first (one intra-host all_gather of R int64 per
// call, on host memory, beside a flag that says whether the rank's arguments are valid).
// all_to_all (equal chunks, the capacity exchange) needs none: every rank knows the counts.
//
// Memory: the stages use host or device buffers like the views (allocated per call from a
// caching allocator): the send rows, twice the rows this rank relays, and the receive rows.
// Errors: bad arguments give kInvalidArgument on this rank and, for all_to_all_v, on the ranks
// of its host (the flag); ranks on other hosts then wait in stage 2 until the timeout, which
// names the missing ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/allocator.h"
#include "comm/communicator.h"

namespace moe::comm {

// The ranks of an EP group laid out by host.
struct HostGrid {
  std::vector<int> host;                  // [R] host index h of each group rank
  std::vector<int> local;                 // [R] local index l of each group rank on its host
  std::vector<std::vector<int>> rank_at;  // [H][L] the group rank of (h, l)

  int hosts() const { return static_cast<int>(rank_at.size()); }
  int per_host() const { return rank_at.empty() ? 0 : static_cast<int>(rank_at[0].size()); }
  // host_of_rank: [R] any host id per group rank (equal ids: one host). kInvalidArgument unless
  // the ids name H >= 2 hosts with the same number L of ranks on each.
  static StatusOr<HostGrid> from_host_ids(const std::vector<int>& host_of_rank);
};

// Rows [src, src + rows) of one buffer copied to rows [dst, dst + rows) of another.
struct RowCopy {
  int64_t src = 0;
  int64_t dst = 0;
  int64_t rows = 0;
};

// One rank's share of a staged exchange (see the file comment).
struct StagedAllToAll {
  std::vector<RowCopy> pack;     // in -> stage-1 send buffer [intra.send_total rows]
  AllToAllPlan intra;            // over the L ranks of this host
  std::vector<RowCopy> regroup;  // stage-1 receive buffer -> stage-2 send buffer
  AllToAllPlan inter;            // over the H ranks with this local index
  std::vector<RowCopy> unpack;   // stage-2 receive buffer [inter.recv_total rows] -> out
};

// The stages of `flat` (this rank's plan) for group rank `rank` of `grid`. host_send_counts:
// [L][R] the flat send counts of every rank of this rank's host (row l: local rank l; row
// grid.local[rank] must equal flat.send_counts). kInvalidArgument on shapes that do not fit.
StatusOr<StagedAllToAll> stage_all_to_all(
    const AllToAllPlan& flat, const HostGrid& grid, int rank,
    const std::vector<std::vector<int64_t>>& host_send_counts);

class HierarchicalCommunicator final : public Communicator {
 public:
  // Collective over `flat` (two splits: the host's ranks, and the ranks of each local index).
  // host_of_rank: as HostGrid::from_host_ids, identical on every rank (kInvalidArgument, before
  // any communication, when it does not fit `flat`).
  static StatusOr<std::unique_ptr<Communicator>> create(std::unique_ptr<Communicator> flat,
                                                        const std::vector<int>& host_of_rank);

  int rank() const override { return flat_->rank(); }
  int world_size() const override { return flat_->world_size(); }
  MemorySpace memory_space() const override { return flat_->memory_space(); }
  const char* backend_name() const override { return flat_->backend_name(); }
  bool ranks_are_threads() const override { return flat_->ranks_are_threads(); }
  bool reduce_scatter_matches_all_reduce() const override {
    return flat_->reduce_scatter_matches_all_reduce();
  }

  Status all_reduce(const TensorView& in, const TensorView& out, ReduceOp op,
                    Stream stream = {}) override {
    return flat_->all_reduce(in, out, op, stream);
  }
  Status all_gather(const TensorView& in, const TensorView& out, Stream stream = {}) override {
    return flat_->all_gather(in, out, stream);
  }
  Status reduce_scatter(const TensorView& in, const TensorView& out, ReduceOp op,
                        Stream stream = {}) override {
    return flat_->reduce_scatter(in, out, op, stream);
  }
  Status broadcast(const TensorView& buf, int root, Stream stream = {}) override {
    return flat_->broadcast(buf, root, stream);
  }
  // Staged as all_to_all_v with every count k = in.dim(0) / R (no counts exchanged).
  Status all_to_all(const TensorView& in, const TensorView& out, Stream stream = {}) override;
  // Staged (file comment); the same contract as the flat communicator's.
  Status all_to_all_v(const TensorView& in, const AllToAllPlan& plan, const TensorView& out,
                      Stream stream = {}) override;
  Status barrier() override { return flat_->barrier(); }
  StatusOr<std::vector<std::string>> gather_bytes(const std::string& mine, int root) override {
    return flat_->gather_bytes(mine, root);
  }
  StatusOr<std::string> broadcast_bytes(const std::string& value, int root) override {
    return flat_->broadcast_bytes(value, root);
  }
  // Of the flat communicator (the result is flat too).
  StatusOr<std::unique_ptr<Communicator>> split(int color, int key) override {
    return flat_->split(color, key);
  }
  // These reach the flat communicator and both stage communicators.
  void set_timeout(double seconds) override;
  Status poll_async_error() override;
  Status abort(const std::string& reason) override;
  Status poll_device_error() override;
  void abort_device(const std::string& reason) override;

  const HostGrid& grid() const { return grid_; }

 private:
  HierarchicalCommunicator(std::unique_ptr<Communicator> flat, std::unique_ptr<Communicator> intra,
                           std::unique_ptr<Communicator> inter, HostGrid grid);
  // Runs `staged` over in/out (any dtype: rows move as bytes).
  Status run_stages(const StagedAllToAll& staged, const TensorView& in, const TensorView& out,
                    Stream stream);
  // A [rows, row_bytes] u8 buffer on `device`.
  StatusOr<Tensor> stage_buffer(Device device, int64_t rows, size_t row_bytes, Stream stream);
  // This host's ranks' flat send counts ([L][R]), exchanged with `valid` (false: this rank's
  // arguments are bad); kInvalidArgument on every rank of the host when any is.
  StatusOr<std::vector<std::vector<int64_t>>> host_send_counts(const AllToAllPlan& plan,
                                                               bool valid);

  std::unique_ptr<Communicator> flat_;   // the EP group
  std::unique_ptr<Communicator> intra_;  // the L ranks of this host, by local index
  std::unique_ptr<Communicator> inter_;  // the H ranks with this local index, by host
  HostGrid grid_;
  std::shared_ptr<Allocator> host_buffers_;    // stage buffers of host views
  std::shared_ptr<Allocator> device_buffers_;  // ... of device views (made on first use)
};

}  // namespace moe::comm
