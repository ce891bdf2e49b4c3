#include "core/train/grad_sync.h"

#include "kernels/optimizer.h"

namespace moe {

Status all_reduce_gradients(ParameterSet* params, comm::Communicator* world,
                            comm::Communicator* dp) {
  const Stream stream = params->context().stream();
  const std::pair<ParamKind, comm::Communicator*> groups[] = {{ParamKind::kDense, world},
                                                              {ParamKind::kExpert, dp}};
  for (const auto& [kind, comm] : groups) {
    const Tensor& grads = params->grads(kind);
    if (comm == nullptr || comm->world_size() == 1 || grads.numel() == 0) continue;
    MOE_RETURN_IF_ERROR(comm->all_reduce(grads, grads, comm::ReduceOp::kSum, stream));
  }
  return Status::OK();
}

Status gradient_squares(ParameterSet* params, const TensorView& out) {
  Context& ctx = params->context();
  MOE_RETURN_IF_ERROR(
      kernels::sum_of_squares(ctx, {params->grads(ParamKind::kDense)}, out.rows(0, 1)));
  return kernels::sum_of_squares(ctx, {params->grads(ParamKind::kExpert)}, out.rows(1, 2));
}

}  // namespace moe
