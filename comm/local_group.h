// Internal to the Local backend (local_communicator.cc): the shared state of one world and of
// each communicator (group) in it, and what a rank posts when it enters a collective.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace moe::comm::detail {

// State shared by every group split from one create_world: the lock, the wake-up signal and the
// abort flag (abort is world-wide, like MPI_Abort).
struct LocalUniverse {
  std::mutex mu;
  std::condition_variable cv;
  double timeout_seconds = 300.0;
  bool aborted = false;
  std::string abort_message;
};

enum class LocalOp {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kAllToAll,
  kAllToAllV,
  kBarrier,
  kGatherBytes,
  kBroadcastBytes,
  kSplit
};

inline const char* op_name(LocalOp op) {
  switch (op) {
    case LocalOp::kAllReduce:
      return "all_reduce";
    case LocalOp::kAllGather:
      return "all_gather";
    case LocalOp::kReduceScatter:
      return "reduce_scatter";
    case LocalOp::kBroadcast:
      return "broadcast";
    case LocalOp::kAllToAll:
      return "all_to_all";
    case LocalOp::kAllToAllV:
      return "all_to_all_v";
    case LocalOp::kBarrier:
      return "barrier";
    case LocalOp::kGatherBytes:
      return "gather_bytes";
    case LocalOp::kBroadcastBytes:
      return "broadcast_bytes";
    case LocalOp::kSplit:
      return "split";
  }
  return "?";
}

// What one rank brings to a collective. Pointers stay valid until every rank has finished.
struct LocalPost {
  LocalOp op = LocalOp::kBarrier;
  std::string arg_error;  // non-empty: this rank's arguments failed the local checks
  const void* in = nullptr;
  size_t in_bytes = 0;
  DType dtype = DType::kU8;
  ReduceOp reduce = ReduceOp::kSum;
  int root = 0;
  const AllToAllPlan* plan = nullptr;
  size_t row_bytes = 0;
  const std::string* bytes = nullptr;
  int color = 0;
  int key = 0;
};

// One communicator's shared state. Written only under universe->mu; posts[q] is written only by
// rank q and read by peers between the two rendezvous phases.
struct LocalGroup {
  struct PendingSplit {
    std::shared_ptr<LocalGroup> group;
    int taken = 0;
  };

  LocalGroup(std::shared_ptr<LocalUniverse> u, std::vector<int> world)
      : universe(std::move(u)),
        world_ranks(std::move(world)),
        posts(world_ranks.size()),
        arrived(world_ranks.size(), 0),
        finished(world_ranks.size(), 0) {}
  int size() const { return static_cast<int>(world_ranks.size()); }

  std::shared_ptr<LocalUniverse> universe;
  std::vector<int> world_ranks;   // [size] group rank -> world rank
  std::vector<LocalPost> posts;   // [size]
  std::vector<int64_t> arrived;   // [size] sequence number of the last collective each rank posted
  std::vector<int64_t> finished;  // [size] ... and of the last one it finished reading
  std::string broken;             // non-empty after a timeout: why the group is unusable
  std::map<std::pair<int64_t, int>, PendingSplit> splits;  // (sequence, color) -> new group
};

}  // namespace moe::comm::detail
