#include "comm/process_groups.h"

#include "base/check.h"

namespace moe::comm {

StatusOr<ProcessGroups> make_process_groups(Communicator* world, int ep_size) {
  if (world == nullptr) return invalid_argument_error("make_process_groups: no world communicator");
  const int n = world->world_size();
  if (ep_size < 1) return invalid_argument_error("--ep ", ep_size, " must be >= 1");
  if (ep_size > n) {
    return invalid_argument_error("--ep ", ep_size, " is larger than the world size ", n);
  }
  if (n % ep_size != 0) {
    return invalid_argument_error("world size ", n, " is not divisible by --ep ", ep_size);
  }
  ProcessGroups groups;
  groups.world = world;
  groups.ep_size = ep_size;
  groups.dp_size = n / ep_size;
  groups.ep_rank = world->rank() % ep_size;
  groups.dp_rank = world->rank() / ep_size;
  // Keys are world ranks, so ranks inside each group keep their world order.
  MOE_ASSIGN_OR_RETURN(groups.ep, world->split(groups.dp_rank, world->rank()));
  MOE_ASSIGN_OR_RETURN(groups.dp, world->split(groups.ep_rank, world->rank()));
  if (!groups.ep || !groups.dp || groups.ep->world_size() != ep_size ||
      groups.dp->world_size() != groups.dp_size || groups.ep->rank() != groups.ep_rank ||
      groups.dp->rank() != groups.dp_rank) {
    return internal_error("make_process_groups: split returned groups of the wrong shape on rank ",
                          world->rank());
  }
  return groups;
}

Status validate_expert_split(int num_experts, int ep_size) {
  if (num_experts < 1) return invalid_argument_error("num_experts ", num_experts, " must be >= 1");
  if (ep_size < 1) return invalid_argument_error("ep ", ep_size, " must be >= 1");
  if (num_experts % ep_size != 0) {
    return invalid_argument_error("num_experts ", num_experts, " is not divisible by ep ", ep_size);
  }
  return Status::OK();
}

}  // namespace moe::comm
