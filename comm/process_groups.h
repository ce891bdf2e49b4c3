// The parallel layout: world N = EP x DP. An EP group is ep_size consecutive world ranks (one
// node's NVLink domain); a DP group holds the ranks with the same position in every EP group.
// For N = 6, ep_size = 3: EP groups {0,1,2} {3,4,5}; DP groups {0,3} {1,4} {2,5}.
//
// Dense parameters are all-reduced over `world`; each expert's parameters over its `dp` group;
// tokens are exchanged inside `ep`.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace moe::comm {

struct ProcessGroups {
  Communicator* world = nullptr;     // borrowed; must outlive the groups
  std::unique_ptr<Communicator> ep;  // ep_size ranks: world ranks [dp_rank*ep_size, +ep_size)
  std::unique_ptr<Communicator> dp;  // dp_size ranks: world ranks {ep_rank + i*ep_size}
  int ep_size = 1;
  int dp_size = 1;
  int ep_rank = 0;  // == ep->rank() == world rank % ep_size
  int dp_rank = 0;  // == dp->rank() == world rank / ep_size
};

// Collective over `world` (two splits, EP first). Errors (kInvalidArgument, identical on every
// rank, checked before any communication): ep_size < 1, ep_size > world size, world size not
// divisible by ep_size ("world size 6 is not divisible by --ep 4"). Split failures propagate.
StatusOr<ProcessGroups> make_process_groups(Communicator* world, int ep_size);

// Local. kInvalidArgument unless num_experts >= 1, ep_size >= 1 and ep_size divides num_experts
// ("num_experts 6 is not divisible by ep 4").
Status validate_expert_split(int num_experts, int ep_size);

}  // namespace moe::comm
