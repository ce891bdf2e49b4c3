// The parallel layout: world N = EP x DP. Which world ranks form an EP group is the placement
// (comm/placement.h): under RANK_ORDER (the default) an EP group is ep_size consecutive world
// ranks; under HOSTS it is ep_size ranks of one host (or whole hosts), whatever order the
// launcher gave the ranks. A DP group holds the ranks with the same position in every EP group.
// For N = 6, ep_size = 3, RANK_ORDER: EP groups {0,1,2} {3,4,5}; DP groups {0,3} {1,4} {2,5}.
//
// Dense parameters are all-reduced over the world in layout order (layout_world()); each
// expert's parameters over its `dp` group; tokens are exchanged inside `ep` (staged through each
// host with parallel.hierarchical_all_to_all: comm/hierarchical_communicator.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "types/run_config.h"

namespace moe::comm {

struct ProcessGroups {
  Communicator* world = nullptr;     // borrowed; must outlive the groups
  std::unique_ptr<Communicator> ep;  // ep_size ranks: EP group dp_rank, by ep_rank
  std::unique_ptr<Communicator> dp;  // dp_size ranks: the ranks with this ep_rank, by dp_rank
  // The world with its ranks in layout order (rank = layout_rank()); null where that is the
  // world's own order (always under RANK_ORDER). Use layout_world().
  std::unique_ptr<Communicator> ordered_world;
  int ep_size = 1;
  int dp_size = 1;
  int ep_rank = 0;  // == ep->rank(); world rank % ep_size under RANK_ORDER
  int dp_rank = 0;  // == dp->rank(); world rank / ep_size under RANK_ORDER
  // [N] the world rank at each layout position p = dp_rank * ep_size + ep_rank: the explicit
  // rank -> (ep_rank, dp_rank) mapping (p == world rank under RANK_ORDER). Position 0 is always
  // world rank 0, so the world's rank 0 leads under every placement.
  std::vector<int> world_rank_at;
  std::string description;  // the layout in one line (describe_layout), for the start-up summary

  // This rank's layout position: the part of every step it computes (its slice of the batch, its
  // place in the world's reductions and gathers).
  int layout_rank() const { return dp_rank * ep_size + ep_rank; }
  // The world in layout order: the world itself unless the placement reordered it.
  Communicator* layout_world() const { return ordered_world ? ordered_world.get() : world; }
};

struct ProcessGroupOptions {
  int ep_size = 1;
  Placement placement = Placement::kRankOrder;
  bool hierarchical_all_to_all = false;
  // This rank's host (empty: host_name(), which MOMOE_HOST_NAME overrides). Ranks that are
  // threads of one process (the Local backend's tests) pose as several hosts here.
  std::string host;
};

// Collective over `world`. Gathers every rank's host name first when the placement or the
// hierarchical all-to-all needs them, then splits the EP and DP groups (and, when the placement
// reorders ranks, the world in layout order; with the hierarchical all-to-all, the EP group's
// stage groups). Errors (kInvalidArgument, identical on every rank, before any split): ep_size <
// 1, ep_size > world size, world size not divisible by ep_size ("world size 6 is not divisible
// by --ep 4"), a HOSTS placement that does not fit the hosts, a hierarchical all-to-all whose EP
// groups do not span hosts evenly (messages name the counts and what to set: comm/placement.h).
// Split failures propagate.
StatusOr<ProcessGroups> make_process_groups(Communicator* world, const ProcessGroupOptions& opts);
// RANK_ORDER with a flat all-to-all.
StatusOr<ProcessGroups> make_process_groups(Communicator* world, int ep_size);

// Local. kInvalidArgument unless num_experts >= 1, ep_size >= 1 and ep_size divides num_experts
// ("num_experts 6 is not divisible by ep 4").
Status validate_expert_split(int num_experts, int ep_size);

}  // namespace moe::comm
