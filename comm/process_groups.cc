#include "comm/process_groups.h"

#include "base/check.h"
#include "comm/hierarchical_communicator.h"
#include "comm/placement.h"

namespace moe::comm {
namespace {

// Every rank's host name, by world rank, on every rank.
StatusOr<std::vector<std::string>> gather_hosts(Communicator& world, const std::string& mine) {
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> all, world.gather_bytes(mine, 0));
  std::string joined;  // the names, each ended by '\0' (which no host name holds)
  for (const std::string& h : all) joined += h + '\0';
  MOE_ASSIGN_OR_RETURN(joined, world.broadcast_bytes(joined, 0));
  std::vector<std::string> hosts;
  for (size_t begin = 0, end; (end = joined.find('\0', begin)) != std::string::npos;
       begin = end + 1) {
    hosts.push_back(joined.substr(begin, end - begin));
  }
  if (static_cast<int>(hosts.size()) != world.world_size()) {
    return internal_error("make_process_groups: ", hosts.size(), " host names for ",
                          world.world_size(), " ranks");
  }
  return hosts;
}

// The shape every split must have given this rank.
bool well_formed(const ProcessGroups& g) {
  return g.ep && g.dp && g.ep->world_size() == g.ep_size && g.dp->world_size() == g.dp_size &&
         g.ep->rank() == g.ep_rank && g.dp->rank() == g.dp_rank &&
         g.layout_world()->rank() == g.layout_rank() &&
         g.layout_world()->world_size() == g.world->world_size();
}

}  // namespace

StatusOr<ProcessGroups> make_process_groups(Communicator* world, const ProcessGroupOptions& opts) {
  if (world == nullptr) return invalid_argument_error("make_process_groups: no world communicator");
  const int n = world->world_size(), me = world->rank();
  // The size checks, before any communication: the same verdict on every rank (job-wide, so
  // that it is printed once).
  if (Status s = place_ranks(n, opts.ep_size, Placement::kRankOrder, {}).status(); !s.ok()) {
    return s.as_job_wide();
  }
  std::vector<std::string> hosts;
  if (opts.placement == Placement::kHosts || opts.hierarchical_all_to_all) {
    MOE_ASSIGN_OR_RETURN(hosts, gather_hosts(*world, opts.host.empty() ? host_name() : opts.host));
  }
  // Every rank holds the same host names from here on, so every verdict is the same everywhere.
  StatusOr<RankLayout> placed = place_ranks(n, opts.ep_size, opts.placement, hosts);
  if (!placed.ok()) return placed.status().as_job_wide();
  const RankLayout layout = std::move(*placed);
  std::vector<int> ep_hosts;
  if (opts.hierarchical_all_to_all) {
    StatusOr<std::vector<int>> by_host = hierarchical_hosts(layout, hosts, layout.dp_rank[me]);
    if (!by_host.ok()) return by_host.status().as_job_wide();
    ep_hosts = std::move(*by_host);
  }
  ProcessGroups groups;
  groups.world = world;
  groups.ep_size = layout.ep_size;
  groups.dp_size = layout.dp_size;
  groups.ep_rank = layout.ep_rank[me];
  groups.dp_rank = layout.dp_rank[me];
  groups.world_rank_at = layout.world_rank_at;
  // Keys are layout ranks, so ranks inside each group keep their layout order (under RANK_ORDER,
  // their world order).
  MOE_ASSIGN_OR_RETURN(groups.ep, world->split(groups.dp_rank, groups.ep_rank));
  MOE_ASSIGN_OR_RETURN(groups.dp, world->split(groups.ep_rank, groups.dp_rank));
  if (!layout.is_rank_order()) {
    MOE_ASSIGN_OR_RETURN(groups.ordered_world, world->split(0, groups.layout_rank()));
  }
  if (!well_formed(groups)) {
    return internal_error("make_process_groups: split returned groups of the wrong shape on rank ",
                          me);
  }
  if (opts.hierarchical_all_to_all) {
    MOE_ASSIGN_OR_RETURN(groups.ep,
                         HierarchicalCommunicator::create(std::move(groups.ep), ep_hosts));
  }
  groups.description = describe_layout(layout, opts.placement, hosts, opts.hierarchical_all_to_all);
  return groups;
}

StatusOr<ProcessGroups> make_process_groups(Communicator* world, int ep_size) {
  ProcessGroupOptions opts;
  opts.ep_size = ep_size;
  return make_process_groups(world, opts);
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
