// AdamW or SGD over a ParameterSet, with per-parameter state tensors that checkpoints save by
// name ("<param>.adam_m", "<param>.adam_v", "<param>.momentum"). Weight decay applies only to
// parameters registered with weight_decay (matrices, not biases, norms or scales).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/run_config.h"
#include "core/layers/parameters.h"

namespace moe {

class Optimizer {
 public:
  struct StateTensor {
    std::string name;    // "<param>.<slot>"
    const Parameter* param;
    Tensor* value;       // same shape and sharding as the parameter
  };

  Optimizer(const OptimizerConfig& cfg, ParameterSet* params);
  // One update at learning rate `lr`; `step` counts completed updates before this one (0-based).
  Status step(double lr, int64_t step);
  std::vector<StateTensor> state_tensors();
  const OptimizerConfig& config() const { return cfg_; }

 private:
  OptimizerConfig cfg_;
  ParameterSet* params_;
  std::vector<Tensor> first_;   // AdamW m, or SGD momentum
  std::vector<Tensor> second_;  // AdamW v
};

}  // namespace moe
