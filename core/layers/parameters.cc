#include "core/layers/parameters.h"

namespace moe {

Parameter& ParameterSet::add(const std::string& name, Shape shape, ParamKind kind,
                             bool weight_decay) {
  MOE_CHECK(find(name) == nullptr, "parameter '", name, "' registered twice");
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->kind = kind;
  p->weight_decay = weight_decay;
  p->value = Tensor::zeros(shape, dtype_);
  p->grad = Tensor::zeros(shape, dtype_);
  params_.push_back(std::move(p));
  return *params_.back();
}

Parameter& ParameterSet::add_expert(const std::string& name, Shape local_shape,
                                    int64_t global_experts, int64_t first_expert,
                                    bool weight_decay) {
  Parameter& p = add(name, local_shape, ParamKind::kExpert, weight_decay);
  p.global_experts = global_experts;
  p.first_expert = first_expert;
  return p;
}

Parameter* ParameterSet::find(const std::string& name) {
  for (auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

const Parameter* ParameterSet::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p->name == name) return p.get();
  return nullptr;
}

int64_t ParameterSet::numel() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p->value.numel();
  return n;
}

Status ParameterSet::zero_grads() {
  for (auto& p : params_) MOE_RETURN_IF_ERROR(p->grad.zero());
  return Status::OK();
}

}  // namespace moe
