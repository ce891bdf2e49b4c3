#include "core/optim/optimizer.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/optimizer.h"

namespace moe {

int Optimizer::slots() const {
  if (cfg_.kind == OptimizerKind::kAdamW) return 2;
  return cfg_.momentum > 0 ? 1 : 0;
}

StatusOr<std::unique_ptr<Optimizer>> Optimizer::create(const OptimizerConfig& cfg,
                                                       ParameterSet* params,
                                                       const StateSharding* sharding) {
  std::unique_ptr<Optimizer> opt(
      new Optimizer(cfg, params, sharding != nullptr ? *sharding : unsharded_state(*params)));
  Context& ctx = params->context();
  for (int slot = 0; slot < opt->slots(); ++slot) {
    for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
      MOE_ASSIGN_OR_RETURN(opt->state_[slot][kind == ParamKind::kDense ? 0 : 1],
                           ctx.zeros({opt->sharding_.of(kind).chunk}, params->master_dtype()));
    }
  }
  return opt;
}

Status Optimizer::update(const Parameter& p, double lr, int64_t step, double grad_scale) {
  const ArenaShard& shard = sharding_.of(p.kind);
  const int64_t lo = std::max(p.arena_offset, shard.begin());
  const int64_t hi = std::min(p.arena_offset + p.numel(), shard.end());
  if (lo >= hi) return Status::OK();
  Context& ctx = params_->context();
  const int64_t first = params_->masters_begin(p.kind);  // 0 unless the masters are sharded
  const TensorView master = params_->masters(p.kind).view().rows(lo - first, hi - first);
  const TensorView grad = params_->grads(p.kind).view().rows(lo, hi);
  auto state_of = [&](int slot) {
    return state(slot, p.kind).view().rows(lo - shard.begin(), hi - shard.begin());
  };
  const double wd = p.weight_decay ? cfg_.weight_decay : 0.0;
  if (cfg_.kind == OptimizerKind::kAdamW) {
    kernels::AdamWArgs a{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, wd, step + 1, grad_scale};
    return kernels::adamw_step(ctx, a, master, grad, state_of(0), state_of(1)).with_context(p.name);
  }
  kernels::SgdArgs a{lr, cfg_.momentum, wd, step == 0, grad_scale};
  const TensorView buf = slots() > 0 ? state_of(0) : TensorView();
  return kernels::sgd_step(ctx, a, master, grad, buf).with_context(p.name);
}

Status Optimizer::step(double lr, int64_t step, double grad_scale) {
  for (const auto& p : params_->all()) MOE_RETURN_IF_ERROR(update(*p, lr, step, grad_scale));
  MOE_RETURN_IF_ERROR(gather_masters());
  return params_->refresh_working();
}

Status Optimizer::gather_masters() {
  const Stream stream = params_->context().stream();
  for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
    const ArenaShard& shard = sharding_.of(kind);
    if (!shard.sharded()) continue;
    const TensorView masters = params_->masters(kind);
    if (!params_->masters_sharded(kind)) {
      MOE_RETURN_IF_ERROR(
          shard.group->all_gather(masters.rows(shard.begin(), shard.end()), masters, stream));
      continue;
    }
    // The gradients are spent: their arena (R x chunk F elements) holds the whole masters.
    const TensorView whole = params_->grads(kind);
    MOE_RETURN_IF_ERROR(shard.group->all_gather(masters, whole, stream));
    MOE_RETURN_IF_ERROR(params_->refresh_values(kind, whole.rows(0, shard.numel)));
  }
  return Status::OK();
}

std::vector<Optimizer::StateTensor> Optimizer::state_tensors() const {
  std::vector<StateTensor> out;
  const char* names[2] = {cfg_.kind == OptimizerKind::kAdamW ? ".adam_m" : ".momentum", ".adam_v"};
  for (const auto& p : params_->all()) {
    for (int slot = 0; slot < slots(); ++slot) {
      const TensorView value =
          sharding_.of(p->kind).sharded() ? TensorView() : p->slice_of(state(slot, p->kind));
      out.push_back({p->name + names[slot], p.get(), slot, value});
    }
  }
  return out;
}

StatusOr<Tensor> Optimizer::gather_on_host(ParamKind kind, const Tensor& mine, GatherTo to) const {
  const ArenaShard& shard = sharding_.of(kind);
  if (to == GatherTo::kEveryRank) {
    MOE_ASSIGN_OR_RETURN(Tensor whole,
                         Tensor::try_empty({shard.ranks * shard.chunk}, mine.dtype()));
    MOE_RETURN_IF_ERROR(shard.group->all_gather(mine, whole));
    return whole.rows(0, shard.numel);
  }
  // To the first rank alone: an all-to-all-v in which every rank sends its chunk to rank 0 only.
  std::vector<int64_t> send(shard.ranks, 0), recv(shard.ranks, shard.rank == 0 ? shard.chunk : 0);
  send[0] = shard.chunk;
  MOE_ASSIGN_OR_RETURN(comm::AllToAllPlan plan,
                       comm::AllToAllPlan::from_counts(std::move(send), std::move(recv)));
  MOE_ASSIGN_OR_RETURN(Tensor whole, Tensor::try_empty({plan.recv_total}, mine.dtype()));
  MOE_RETURN_IF_ERROR(shard.group->all_to_all_v(mine, plan, whole));
  return shard.rank == 0 ? whole.rows(0, shard.numel) : whole;
}

StatusOr<Tensor> Optimizer::whole_state(int slot, ParamKind kind, GatherTo to) const {
  MOE_ASSIGN_OR_RETURN(Tensor mine, params_->context().read_back(state(slot, kind)));
  if (!sharding_.of(kind).sharded()) return mine;
  return gather_on_host(kind, mine, to);
}

StatusOr<Tensor> Optimizer::whole_masters(ParamKind kind, GatherTo to) const {
  const TensorView masters = params_->masters(kind);
  if (!params_->masters_sharded(kind)) {
    return params_->context().read_back(masters.rows(0, params_->numel(kind)));
  }
  MOE_ASSIGN_OR_RETURN(Tensor mine, params_->context().read_back(masters));
  return gather_on_host(kind, mine, to);
}

Status Optimizer::load_masters(ParamKind kind, const TensorView& whole) {
  Context& ctx = params_->context();
  const int64_t numel = params_->numel(kind);
  if (whole.numel() < numel || whole.dtype() != params_->master_dtype()) {
    return invalid_argument_error("load_masters: the ",
                                  kind == ParamKind::kDense ? "dense parameters" : "expert shards",
                                  " hold ", numel, " ", dtype_name(params_->master_dtype()),
                                  " elements, not ", whole.to_string());
  }
  const TensorView masters = params_->masters(kind);
  if (!params_->masters_sharded(kind)) {
    return ctx.copy(whole.rows(0, numel), masters.rows(0, numel));
  }
  const ArenaShard& shard = sharding_.of(kind);
  const int64_t n = shard.data_end() - shard.begin();
  if (n > 0) {
    MOE_RETURN_IF_ERROR(ctx.copy(whole.rows(shard.begin(), shard.data_end()), masters.rows(0, n)));
  }
  // The values from the whole masters, on the device in the gradients arena (dead between steps).
  const TensorView staged = params_->grads(kind).view().rows(0, numel);
  MOE_RETURN_IF_ERROR(ctx.copy(whole.rows(0, numel), staged));
  return params_->refresh_values(kind, staged);
}

Status Optimizer::load_state(int slot, ParamKind kind, const TensorView& whole) {
  const ArenaShard& shard = sharding_.of(kind);
  if (whole.numel() < shard.numel || whole.dtype() != params_->master_dtype()) {
    return invalid_argument_error("load_state: the optimizer state of the ",
                                  kind == ParamKind::kDense ? "dense parameters" : "expert shards",
                                  " holds ", shard.numel, " ", dtype_name(params_->master_dtype()),
                                  " elements, not ", whole.to_string());
  }
  const int64_t n = shard.data_end() - shard.begin();
  if (n == 0) return Status::OK();
  return params_->context().copy(whole.rows(shard.begin(), shard.data_end()),
                                 state(slot, kind).view().rows(0, n));
}

}  // namespace moe
