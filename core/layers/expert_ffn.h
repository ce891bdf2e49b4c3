// The local experts of one MoE layer as grouped two-layer FFNs over expert-major rows:
//   y = dropout(act(x W1_e + b1_e)) W2_e + b2_e     for the rows of expert e,
// one grouped GEMM per weight over all local experts (BLAS on the CPU, cuBLAS on the GPU).
// Dropout masks are keyed by each row's (global token, choice) key, so they do not depend on
// where a row sits in a buffer (the same masks for every EP layout).
//
// Parameters (expert shards, [E_local, ...]): <prefix>.w1 [E_l, D, F], <prefix>.b1 [E_l, F],
// <prefix>.w2 [E_l, F, D], <prefix>.b2 [E_l, D].
#pragma once

#include <string>
#include <vector>

#include "core/base/moe_config.h"
#include "core/base/rng.h"
#include "core/layers/parameters.h"
#include "kernels/activation.h"

namespace moe {

struct ExpertSaved {
  Tensor x;       // [M, D] rows, grouped by local expert
  Tensor h_pre;   // [M, F] pre-activation
  Tensor h;       // [M, F] after activation and dropout
  Tensor row_keys;  // [M] i64 dropout keys
  std::vector<int64_t> offsets;  // [E_l + 1]
  bool dropout = false;
  CounterRng rng;
};

class ExpertFfn {
 public:
  // Registers the shards of experts [first_expert, first_expert + local_experts).
  ExpertFfn(const std::string& prefix, const MoeLayerConfig& cfg, int64_t local_experts,
            int64_t first_expert, ParameterSet* params);

  // x [M, D] with group offsets [E_l + 1]; writes y [M, D]. dropout_p > 0 only in training.
  Status forward(const TensorView& x, const std::vector<int64_t>& offsets,
                 const TensorView& row_keys, CounterRng rng, float dropout_p,
                 const TensorView& y, ExpertSaved* saved);
  // dy [M, D] -> dx [M, D] (overwritten); parameter gradients accumulate.
  Status backward(const TensorView& dy, const ExpertSaved& saved, float dropout_p,
                  const TensorView& dx);

  int64_t local_experts() const { return local_experts_; }

 private:
  kernels::Activation activation_;
  int64_t local_experts_;
  int64_t d_ff_;
  Parameter* w1_;
  Parameter* b1_;
  Parameter* w2_;
  Parameter* b2_;
};

kernels::Activation to_kernel_activation(ExpertActivation act);

}  // namespace moe
