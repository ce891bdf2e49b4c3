// The local experts of one MoE layer as two-layer FFNs over the expert blocks of the receive
// buffer (kernels/expert_blocks.h: block b = r * E_l + l holds the rows EP rank r sent to local
// expert l):
//   y = dropout(act(x W1_e + b1_e)) W2_e + b2_e     for the rows of expert e,
// one expert GEMM per weight over all blocks (BLAS on the CPU, cuBLAS on the GPU). Dropout masks
// are keyed by each row's (global token, choice) key, so they do not depend on where a row sits in
// a buffer (the same masks for every EP layout); rows whose key is negative are empty slots.
//
// Parameters (expert shards, [E_local, ...]): <prefix>.w1 [E_l, D, F], <prefix>.b1 [E_l, F],
// <prefix>.w2 [E_l, F, D], <prefix>.b2 [E_l, D]. The matrices are GEMM operands (bf16 under BF16).
#pragma once

#include <string>

#include "base/rng.h"
#include "core/layers/parameters.h"
#include "kernels/activation.h"
#include "kernels/expert_blocks.h"
#include "types/moe_config.h"

namespace moe {

struct ExpertSaved {
  Tensor x;         // [M, D] rows, in blocks
  Tensor h_pre;     // [M, F] pre-activation
  Tensor h;         // [M, F] after activation and dropout
  Tensor row_keys;  // [M] i64 dropout keys
  kernels::ExpertBlocks blocks;
  float dropout = 0.f;
  CounterRng rng;
};

class ExpertFfn {
 public:
  // Registers the shards of experts [first_expert, first_expert + local_experts).
  ExpertFfn(const std::string& prefix, const MoeLayerConfig& cfg, int64_t local_experts,
            int64_t first_expert, ParameterSet* params);

  // x [M, D] in `blocks`; row_keys [M] i64. dropout_p > 0 only in training. Returns y [M, D].
  StatusOr<Tensor> forward(const Tensor& x, const kernels::ExpertBlocks& blocks,
                           const Tensor& row_keys, CounterRng rng, float dropout_p,
                           ExpertSaved* saved);
  // dy [M, D]; returns dx [M, D]; parameter gradients accumulate.
  StatusOr<Tensor> backward(const Tensor& dy, const ExpertSaved& saved);

  int64_t local_experts() const { return local_experts_; }

 private:
  Context& ctx_;
  DType act_;
  kernels::Activation activation_;
  int64_t local_experts_;
  int64_t d_model_, d_ff_;
  Parameter* w1_;
  Parameter* b1_;
  Parameter* w2_;
  Parameter* b2_;
};

kernels::Activation to_kernel_activation(ExpertActivation act);

}  // namespace moe
