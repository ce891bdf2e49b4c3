// AdamW or SGD over a ParameterSet's full-precision masters. The state lives in arenas laid out
// like the masters (one per kind and slot), so a parameter's state is Parameter::slice_of(arena)
// and checkpoints save it by name ("<param>.adam_m", "<param>.adam_v", "<param>.momentum").
// Weight decay applies only to parameters registered with weight_decay (matrices, not biases,
// norms or scales). After an update the working copies (bf16 under BF16) are refreshed.
#pragma once

#include <string>
#include <vector>

#include "core/layers/parameters.h"
#include "types/run_config.h"

namespace moe {

class Optimizer {
 public:
  struct StateTensor {
    std::string name;  // "<param>.<slot name>"
    const Parameter* param;
    int slot;          // 0: AdamW m or SGD momentum; 1: AdamW v
    TensorView value;  // on the device, same shape as the parameter
  };

  static StatusOr<std::unique_ptr<Optimizer>> create(const OptimizerConfig& cfg,
                                                     ParameterSet* params);
  // One update at learning rate `lr`; `step` counts completed updates before this one
  // (0-based). Gradients are multiplied by grad_scale (clipping) on the way in.
  Status step(double lr, int64_t step, double grad_scale = 1.0);
  std::vector<StateTensor> state_tensors() const;
  // The state arena of one slot and kind (empty when the optimizer has no such slot).
  const Tensor& state(int slot, ParamKind kind) const {
    return state_[slot][kind == ParamKind::kDense ? 0 : 1];
  }
  int slots() const;
  const OptimizerConfig& config() const { return cfg_; }

 private:
  Optimizer(const OptimizerConfig& cfg, ParameterSet* params) : cfg_(cfg), params_(params) {}

  OptimizerConfig cfg_;
  ParameterSet* params_;
  Tensor state_[2][2];  // [slot][kind]
};

}  // namespace moe
