// The MoE transformer language model: embedding (+ learned positions, dropout) -> blocks ->
// (final LN for pre-LN) -> output head -> cross-entropy. Owns its ParameterSet; the MoE layers'
// experts are sharded over the EP communicator given at construction.
//
// Per micro-batch: forward() saves activations in an Activations object and returns the loss
// sums; backward() accumulates parameter gradients of
//   ce_scale * (mean token cross-entropy) + aux_scale * (sum of the MoE layers' aux losses).
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/base/model_config.h"
#include "core/base/router_stats.h"
#include "core/layers/embedding.h"
#include "core/model/block.h"

namespace moe {

struct LossResult {
  double loss_sum = 0;  // sum of token cross-entropies
  int64_t tokens = 0;   // counted tokens
  double aux_loss = 0;  // weighted balance + z losses, summed over MoE layers
  double mean() const { return tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0.0; }
};

class TransformerLM {
 public:
  struct Activations {
    StepContext ctx;
    Tensor inputs, targets;  // i32 [B, S]
    std::vector<TransformerBlock::Saved> blocks;
    LayerNorm::Saved final_ln;
    Tensor h_final;          // [N, D] head input
    Tensor logits;           // [N, V]
    Tensor lse;              // [N] logsumexp of each row of logits
    int64_t counted = 0;
  };

  // dtype: f32 for training on the CPU, f64 for gradient checks. ep_comm: nullable (one rank).
  TransformerLM(const ModelConfig& cfg, DType dtype, comm::Communicator* ep_comm);

  // Deterministic initialisation from `seed`: every element is drawn from a counter keyed by the
  // parameter's name and its global index, so any EP layout gets the same global weights.
  // Matrices ~ N(0, init_std); biases 0; LayerNorm gamma 1; SparseMixer omega 1.
  Status init_parameters(uint64_t seed);

  // inputs, targets i32 [B, S] (targets -1 ignored). stats: one entry per MoE layer, merged into
  // (so micro-batches accumulate); may be null.
  Status forward(const TensorView& inputs, const TensorView& targets, const StepContext& ctx,
                 Activations* acts, LossResult* loss, std::vector<RouterStatsInfo>* stats);
  Status backward(const Activations& acts, double ce_scale, double aux_scale);
  // Per-token log-likelihood evaluation (no dropout, nothing saved): returns the loss sums.
  StatusOr<LossResult> evaluate(const TensorView& inputs, const TensorView& targets,
                                const StepContext& ctx, std::vector<RouterStatsInfo>* stats);
  // The argmax expert of every MoE layer for every token of `inputs` (evaluation mode): the probe
  // for the routing flip rate. Returns one [N] i32 tensor per MoE layer.
  StatusOr<std::vector<Tensor>> route_probe(const TensorView& inputs, const StepContext& ctx);

  ParameterSet& params() { return *params_; }
  const ModelConfig& config() const { return cfg_; }
  int num_moe_layers() const { return num_moe_; }

 private:
  Status forward_impl(const TensorView& inputs, const TensorView& targets, const StepContext& ctx,
                      Activations* acts, LossResult* loss, std::vector<RouterStatsInfo>* stats,
                      std::vector<Tensor>* top1s);

  ModelConfig cfg_;
  std::unique_ptr<ParameterSet> params_;
  std::unique_ptr<Embedding> embed_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<LayerNorm> final_ln_;  // pre-LN only
  std::unique_ptr<OutputHead> head_;
  int num_moe_ = 0;
};

}  // namespace moe
