#include "core/train/grad_sync.h"

#include <cmath>
#include <cstring>

#include "kernels/optimizer.h"

namespace moe {
namespace {

Status reduce_kind(ParameterSet* params, ParamKind kind, comm::Communicator* comm) {
  if (comm == nullptr || comm->world_size() == 1) return Status::OK();
  int64_t total = 0;
  for (const auto& p : params->all())
    if (p->kind == kind) total += p->grad.numel();
  if (total == 0) return Status::OK();
  const size_t elem = dtype_size(params->dtype());
  Tensor packed = Tensor::empty({total}, params->dtype());
  char* dst = static_cast<char*>(packed.raw());
  for (const auto& p : params->all()) {
    if (p->kind != kind) continue;
    std::memcpy(dst, p->grad.raw(), p->grad.nbytes());
    dst += p->grad.numel() * elem;
  }
  MOE_RETURN_IF_ERROR(comm->all_reduce(packed, packed, comm::ReduceOp::kSum));
  const char* src = static_cast<const char*>(packed.raw());
  for (const auto& p : params->all()) {
    if (p->kind != kind) continue;
    std::memcpy(p->grad.raw(), src, p->grad.nbytes());
    src += p->grad.numel() * elem;
  }
  return Status::OK();
}

}  // namespace

Status all_reduce_gradients(ParameterSet* params, comm::Communicator* world,
                            comm::Communicator* dp) {
  MOE_RETURN_IF_ERROR(reduce_kind(params, ParamKind::kDense, world));
  return reduce_kind(params, ParamKind::kExpert, dp);
}

StatusOr<double> global_grad_norm(const ParameterSet& params, comm::Communicator* ep) {
  std::vector<TensorView> dense, expert;
  for (const auto& p : params.all()) (p->kind == ParamKind::kDense ? dense : expert).push_back(p->grad);
  MOE_ASSIGN_OR_RETURN(double dense_sq, kernels::sum_of_squares(dense));
  MOE_ASSIGN_OR_RETURN(double expert_sq, kernels::sum_of_squares(expert));
  if (ep != nullptr && ep->world_size() > 1) {
    Tensor v = Tensor::from_vector<double>({1}, {expert_sq});
    MOE_RETURN_IF_ERROR(ep->all_reduce(v, v, comm::ReduceOp::kSum));
    expert_sq = v.data<double>()[0];
  }
  return std::sqrt(dense_sq + expert_sq);
}

Status scale_gradients(ParameterSet* params, double scale) {
  for (const auto& p : params->all()) MOE_RETURN_IF_ERROR(kernels::scale_inplace(p->grad, scale));
  return Status::OK();
}

}  // namespace moe
