// Where each rank of a job runs, gathered once at start-up: its host, its node-local rank (from
// the launcher's environment, which picks a rank's GPU), its device, and the memory pool it draws
// on (run_device.h: a host's RAM, or one GPU). Rank 0 groups the ranks by pool for the memory
// check, so two hosts are two pools even where their ranks share a file system, and prints where
// every rank landed (tests/launcher/multihost_test.sh reads both lines).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/train/run_device.h"

namespace moe {

struct RankPlace {
  std::string host;              // host_name()
  int node_local_rank = -1;      // node_local_rank(): -1 when no launcher variable says
  std::string device;            // "the CPU", "cuda:1"
  int64_t available_bytes = -1;  // RunDevice::available_bytes (-1: unknown)
  std::string memory_key;        // RunDevice::memory_key: ranks with the same key share the pool
  std::string memory_name;       // RunDevice::memory_name

  // One line of tab-separated fields for Communicator::gather_bytes, and back; from_text is
  // kInvalidArgument naming the text when it is not one.
  std::string to_text() const;
  static StatusOr<RankPlace> from_text(const std::string& text);
};

// This process's place: its host name, node-local rank and `device`'s memory.
RankPlace this_rank_place(const RunDevice& device);

struct MemoryPool {
  std::string name;        // its first rank's memory_name
  int64_t available = -1;  // the least any of its ranks saw (-1 when any saw unknown)
  std::vector<int> ranks;  // world ranks, ascending
};

// places[r] is world rank r's. One pool per memory key, in the order of their first ranks.
std::vector<MemoryPool> memory_pools(const std::vector<RankPlace>& places);

// "momoe: placement: host a: rank 0 (node-local 0, the CPU), rank 1 (node-local 1, the CPU);
// host b: rank 2 (...), rank 3 (...)": hosts in the order of their first ranks ("node-local ?"
// where no launcher said).
std::string placement_line(const std::vector<RankPlace>& places);

// "momoe: memory check: host a (ranks 0, 1): 2 x 0.05 GiB of 120.31 GiB available; host b
// (ranks 2, 3): ...": what check_memory compared, per pool (per_rank_bytes: one rank's estimate).
std::string memory_check_line(const std::vector<MemoryPool>& pools, int64_t per_rank_bytes);

}  // namespace moe
