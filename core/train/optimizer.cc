#include "core/train/optimizer.h"

#include "kernels/optimizer.h"

namespace moe {

Optimizer::Optimizer(const OptimizerConfig& cfg, ParameterSet* params) : cfg_(cfg), params_(params) {
  for (const auto& p : params->all()) {
    const bool needs_first = cfg.kind == OptimizerKind::kAdamW || cfg.momentum > 0;
    first_.push_back(needs_first ? Tensor::zeros(p->value.shape(), p->value.dtype()) : Tensor());
    second_.push_back(cfg.kind == OptimizerKind::kAdamW
                          ? Tensor::zeros(p->value.shape(), p->value.dtype())
                          : Tensor());
  }
}

Status Optimizer::step(double lr, int64_t step) {
  const auto& all = params_->all();
  for (size_t i = 0; i < all.size(); ++i) {
    Parameter& p = *all[i];
    const double wd = p.weight_decay ? cfg_.weight_decay : 0.0;
    if (cfg_.kind == OptimizerKind::kAdamW) {
      kernels::AdamWArgs a{lr, cfg_.beta1, cfg_.beta2, cfg_.eps, wd, step + 1};
      MOE_RETURN_IF_ERROR(kernels::adamw_step(a, p.value, p.grad, first_[i], second_[i])
                              .with_context(p.name));
    } else {
      kernels::SgdArgs a{lr, cfg_.momentum, wd, step == 0};
      MOE_RETURN_IF_ERROR(kernels::sgd_step(a, p.value, p.grad, first_[i]).with_context(p.name));
    }
  }
  return Status::OK();
}

std::vector<Optimizer::StateTensor> Optimizer::state_tensors() {
  std::vector<StateTensor> out;
  const auto& all = params_->all();
  const char* first_name = cfg_.kind == OptimizerKind::kAdamW ? ".adam_m" : ".momentum";
  for (size_t i = 0; i < all.size(); ++i) {
    if (first_[i].numel() > 0) out.push_back({all[i]->name + first_name, all[i].get(), &first_[i]});
    if (second_[i].numel() > 0) out.push_back({all[i]->name + ".adam_v", all[i].get(), &second_[i]});
  }
  return out;
}

}  // namespace moe
