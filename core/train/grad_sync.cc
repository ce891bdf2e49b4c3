#include "core/train/grad_sync.h"

#include "kernels/optimizer.h"

namespace moe {
namespace {

// The sum of squares of a sharded kind's reduced gradients into out [1]: each rank sums its
// chunk's blocks, the blocks are gathered in rank order (which is block order) and added in
// that order, as sum_of_squares adds the whole arena's blocks. Where a device's sum cannot be
// cut into blocks (a GPU's is grid-strided), the chunks are all-gathered and the whole arena
// summed instead.
Status sharded_squares(ParameterSet* params, ParamKind kind, const ArenaShard& shard,
                       const TensorView& out) {
  Context& ctx = params->context();
  const TensorView grads = params->grads(kind);
  if (!kernels::sum_of_squares_by_blocks(ctx)) {
    MOE_RETURN_IF_ERROR(
        shard.group->all_gather(grads.rows(shard.begin(), shard.end()), grads, ctx.stream()));
    return kernels::sum_of_squares(ctx, {grads.rows(0, shard.numel)}, out);
  }
  const int64_t per_rank = shard.chunk / kernels::kSquaresBlock;
  MOE_ASSIGN_OR_RETURN(Tensor blocks, ctx.zeros({shard.ranks * per_rank}, DType::kF64));
  const TensorView mine = blocks.view().rows(shard.rank * per_rank, (shard.rank + 1) * per_rank);
  const int64_t n = shard.data_end() - shard.begin();  // past it: padding, whose blocks stay 0
  if (n > 0) {
    const int64_t used = (n + kernels::kSquaresBlock - 1) / kernels::kSquaresBlock;
    MOE_RETURN_IF_ERROR(kernels::sum_of_squares_blocks(
        ctx, grads.rows(shard.begin(), shard.data_end()), mine.rows(0, used)));
  }
  MOE_RETURN_IF_ERROR(shard.group->all_gather(mine, blocks, ctx.stream()));
  return kernels::sum_in_order(ctx, blocks, out);
}

}  // namespace

Status reduce_gradients(ParameterSet* params, comm::Communicator* world, comm::Communicator* dp,
                        const StateSharding& sharding) {
  const Stream stream = params->context().stream();
  const std::pair<ParamKind, comm::Communicator*> groups[] = {{ParamKind::kDense, world},
                                                              {ParamKind::kExpert, dp}};
  for (const auto& [kind, comm] : groups) {
    const Tensor& grads = params->grads(kind);
    const ArenaShard& shard = sharding.of(kind);
    if (shard.sharded() && shard.exact_reduce_scatter) {
      const TensorView chunk = grads.view().rows(shard.begin(), shard.end());
      MOE_RETURN_IF_ERROR(shard.group->reduce_scatter(grads, chunk, comm::ReduceOp::kSum, stream));
      continue;
    }
    // A sharded kind whose group's reduce_scatter sums in another order than its all_reduce: the
    // whole arena, as the replicated optimizer reduces it.
    comm::Communicator* group = shard.sharded() ? shard.group : comm;
    if (group == nullptr || group->world_size() == 1 || grads.numel() == 0) continue;
    MOE_RETURN_IF_ERROR(group->all_reduce(grads, grads, comm::ReduceOp::kSum, stream));
  }
  return Status::OK();
}

Status gradient_squares(ParameterSet* params, const StateSharding& sharding,
                        const TensorView& out) {
  Context& ctx = params->context();
  for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
    const int i = kind == ParamKind::kDense ? 0 : 1;
    const ArenaShard& shard = sharding.of(kind);
    if (shard.sharded()) {
      MOE_RETURN_IF_ERROR(sharded_squares(params, kind, shard, out.rows(i, i + 1)));
    } else {
      MOE_RETURN_IF_ERROR(kernels::sum_of_squares(
          ctx, {params->grads(kind).view().rows(0, shard.numel)}, out.rows(i, i + 1)));
    }
  }
  return Status::OK();
}

}  // namespace moe
