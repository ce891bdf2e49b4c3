#include "core/optim/optimizer.h"

#include "kernels/optimizer.h"

namespace moe {

int Optimizer::slots() const {
  if (cfg_.kind == OptimizerKind::kAdamW) return 2;
  return cfg_.momentum > 0 ? 1 : 0;
}

StatusOr<std::unique_ptr<Optimizer>> Optimizer::create(const OptimizerConfig& cfg,
                                                       ParameterSet* params) {
  std::unique_ptr<Optimizer> opt(new Optimizer(cfg, params));
  Context& ctx = params->context();
  for (int slot = 0; slot < opt->slots(); ++slot) {
    for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
      MOE_ASSIGN_OR_RETURN(opt->state_[slot][kind == ParamKind::kDense ? 0 : 1],
                           ctx.zeros({params->numel(kind)}, params->master_dtype()));
    }
  }
  return opt;
}

Status Optimizer::step(double lr, int64_t step, double grad_scale) {
  Context& ctx = params_->context();
  for (const auto& owned : params_->all()) {
    const Parameter& p = *owned;
    const double wd = p.weight_decay ? cfg_.weight_decay : 0.0;
    if (cfg_.kind == OptimizerKind::kAdamW) {
      kernels::AdamWArgs a{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, wd, step + 1, grad_scale};
      MOE_RETURN_IF_ERROR(kernels::adamw_step(ctx, a, p.master, p.grad,
                                              p.slice_of(state(0, p.kind)),
                                              p.slice_of(state(1, p.kind)))
                              .with_context(p.name));
    } else {
      kernels::SgdArgs a{lr, cfg_.momentum, wd, step == 0, grad_scale};
      const TensorView buf = slots() > 0 ? p.slice_of(state(0, p.kind)) : TensorView();
      MOE_RETURN_IF_ERROR(kernels::sgd_step(ctx, a, p.master, p.grad, buf).with_context(p.name));
    }
  }
  return params_->refresh_working();
}

std::vector<Optimizer::StateTensor> Optimizer::state_tensors() const {
  std::vector<StateTensor> out;
  const char* names[2] = {cfg_.kind == OptimizerKind::kAdamW ? ".adam_m" : ".momentum", ".adam_v"};
  for (const auto& p : params_->all()) {
    for (int slot = 0; slot < slots(); ++slot) {
      out.push_back({p->name + names[slot], p.get(), slot, p->slice_of(state(slot, p->kind))});
    }
  }
  return out;
}

}  // namespace moe
