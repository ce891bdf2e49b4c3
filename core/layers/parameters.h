// Named parameters with their gradients. A model owns one ParameterSet; every layer registers its
// tensors at construction and keeps views. Names are stable, dotted paths ("blocks.3.moe.w1") and
// are the tensor names in checkpoints.
//
// Expert parameters are sharded over the EP group: a rank holds experts
// [first_expert, first_expert + local_experts) of `global_experts`, stacked along dimension 0.
// Dense parameters are replicated. Gradients are accumulated (+=) by backward and cleared by
// zero_grads().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/tensor.h"

namespace moe {

enum class ParamKind {
  kDense,   // replicated on every rank; gradients all-reduced over the world
  kExpert,  // one shard per EP rank, [local_experts, ...]; gradients all-reduced over the DP group
};

struct Parameter {
  std::string name;
  ParamKind kind = ParamKind::kDense;
  bool weight_decay = true;  // AdamW decays matrices, not biases, norms or scales
  Tensor value;
  Tensor grad;
  // kExpert only: where this shard sits in the global [global_experts, ...] tensor.
  int64_t global_experts = 0;
  int64_t first_expert = 0;
};

class ParameterSet {
 public:
  explicit ParameterSet(DType dtype) : dtype_(dtype) {}
  ParameterSet(const ParameterSet&) = delete;
  ParameterSet& operator=(const ParameterSet&) = delete;

  // Registers a zero-initialised host parameter (and a zero gradient). Aborts on a duplicate name
  // (a programmer error). The returned reference stays valid for the set's lifetime.
  Parameter& add(const std::string& name, Shape shape, ParamKind kind = ParamKind::kDense,
                 bool weight_decay = true);
  Parameter& add_expert(const std::string& name, Shape local_shape, int64_t global_experts,
                        int64_t first_expert, bool weight_decay = true);

  // nullptr when absent.
  Parameter* find(const std::string& name);
  const Parameter* find(const std::string& name) const;
  const std::vector<std::unique_ptr<Parameter>>& all() const { return params_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const;  // local element count
  Status zero_grads();

 private:
  DType dtype_;
  std::vector<std::unique_ptr<Parameter>> params_;
};

}  // namespace moe
