// Which world rank plays which part of the EP x DP layout (parallel.placement), computed from the
// host each rank reports. Local and pure: make_process_groups gathers every rank's host name, so
// every rank computes the same layout and reaches the same verdict.
//
// A rank's layout position is p = dp_rank * ep_size + ep_rank: the world rank that would play its
// part under RANK_ORDER. The trainer hands out work by position (its slice of each micro-batch,
// the sequence offsets of the random draws, its place in every reduction and gather over the
// world), so a placement moves processes between parts, never what a part computes.
//
// RANK_ORDER: EP group d is world ranks [d*ep, (d+1)*ep); position == world rank.
// HOSTS: hosts are taken in the order of their first world rank, a host's ranks in world order.
//   - ep divides every host's rank count: each host's ranks are cut into EP groups of ep
//     consecutive ranks (EP stays inside a host); DP groups span hosts.
//   - else every host runs the same P ranks and ep is a multiple of P: an EP group is ep / P
//     consecutive whole hosts (ep_rank = host in group * P + index on the host).
//   - else kInvalidArgument naming the counts and the --ep values that would fit.
// Example: 4 ranks on hosts a b a b (mpirun --map-by node), ep 2: EP groups {0, 2} {1, 3} (one per
// host), DP groups {0, 1} {2, 3}; positions: world 0 -> 0, 2 -> 1, 1 -> 2, 3 -> 3.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "types/run_config.h"

namespace moe::comm {

struct RankLayout {
  int ep_size = 1;
  int dp_size = 1;
  std::vector<int> ep_rank;        // [N] each world rank's rank in its EP group
  std::vector<int> dp_rank;        // [N] each world rank's rank in its DP group (= its EP group)
  std::vector<int> world_rank_at;  // [N] the world rank at each layout position

  int world_size() const { return static_cast<int>(ep_rank.size()); }
  int position(int world_rank) const { return dp_rank[world_rank] * ep_size + ep_rank[world_rank]; }
  // True when every world rank is at its own position (the RANK_ORDER layout).
  bool is_rank_order() const;
  // The world ranks of EP group `dp` (0 <= dp < dp_size), in EP-rank order: [ep_size].
  std::vector<int> ep_group(int dp) const;
};

// hosts: [world_size] each world rank's host name (RANK_ORDER ignores it: may be empty).
// Errors (kInvalidArgument): ep_size < 1, ep_size not dividing world_size ("world size 6 is not
// divisible by --ep 4"), hosts of the wrong length for HOSTS, a HOSTS placement that does not fit
// (as above).
StatusOr<RankLayout> place_ranks(int world_size, int ep_size, Placement placement,
                                 const std::vector<std::string>& hosts);

// For parallel.hierarchical_all_to_all: the host of each EP rank of EP group `dp`, as indices
// 0..H-1 in the order of each host's first EP rank ([ep_size]). Checks every EP group (so every
// rank reaches the same verdict): kInvalidArgument unless each spreads over H >= 2 hosts with the
// same number L of its ranks on each, naming the first group that does not.
StatusOr<std::vector<int>> hierarchical_hosts(const RankLayout& layout,
                                              const std::vector<std::string>& hosts, int dp);

// One line for the start-up summary: the placement, the hosts and their rank counts, the EP
// groups (world ranks; the first few) and where they lie, and the all-to-all ("flat" or
// "hierarchical"). hosts may be empty (not gathered: RANK_ORDER with a flat all-to-all).
std::string describe_layout(const RankLayout& layout, Placement placement,
                            const std::vector<std::string>& hosts, bool hierarchical);

}  // namespace moe::comm
