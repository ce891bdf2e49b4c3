#include "core/optim/state_sharding.h"

#include <utility>

#include "kernels/optimizer.h"

namespace moe {
namespace {

ArenaShard whole(int64_t numel) {
  ArenaShard s;
  s.numel = numel;
  s.chunk = numel;
  return s;
}

}  // namespace

int64_t shard_chunk(int64_t numel, int ranks) {
  if (ranks <= 1 || numel == 0) return numel;
  const int64_t span = ranks * kernels::kSquaresBlock;
  return (numel + span - 1) / span * kernels::kSquaresBlock;
}

StateSharding unsharded_state(const ParameterSet& params) {
  return {whole(params.numel(ParamKind::kDense)), whole(params.numel(ParamKind::kExpert))};
}

StatusOr<StateSharding> shard_optimizer_state(ParameterSet* params, comm::Communicator* world,
                                              comm::Communicator* dp) {
  StateSharding sharding = unsharded_state(*params);
  const std::pair<ParamKind, comm::Communicator*> groups[] = {{ParamKind::kDense, world},
                                                              {ParamKind::kExpert, dp}};
  for (const auto& [kind, group] : groups) {
    ArenaShard& s = kind == ParamKind::kDense ? sharding.dense : sharding.expert;
    if (group == nullptr || group->world_size() <= 1 || s.numel == 0) continue;
    s.group = group;
    s.ranks = group->world_size();
    s.rank = group->rank();
    s.chunk = shard_chunk(s.numel, s.ranks);
    s.exact_reduce_scatter = group->reduce_scatter_matches_all_reduce();
    MOE_RETURN_IF_ERROR(params->pad_arenas(kind, s.ranks * s.chunk));
    // Under BF16 the fp32 masters are optimizer state too: this rank keeps its chunk.
    if (params->act_dtype() != params->master_dtype()) {
      MOE_RETURN_IF_ERROR(params->shard_masters(kind, s.begin(), s.chunk));
    }
  }
  return sharding;
}

}  // namespace moe
