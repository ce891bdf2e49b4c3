// The MoE transformer language model: embedding (+ learned positions, dropout) -> blocks ->
// (final LN for pre-LN) -> output head -> cross-entropy; under RoPE (ModelConfig::position) the
// attention rotates q and k by position and the embedding has no learned positions. Owns its
// ParameterSet on its Context; the MoE layers' experts are sharded over the EP communicator given
// at creation.
//
// Device-neutral: forward and backward enqueue kernels and collectives on the Context and never
// read results on the host. Losses and statistics accumulate into device tensors the caller owns
// (read back once per step by the trainer):
//   sums f64 [kLossSlots]: += the token cross-entropy sum, += the counted tokens, += the MoE
//   layers' weighted aux losses;
//   stats f64 [stats_size()]: one RouterStatsLayout block per MoE layer, at stats_offset(l).
// backward() accumulates parameter gradients of
//   ce_scale * (sum of token cross-entropies) + aux_scale * (sum of the MoE layers' aux losses).
//
// Activation recomputation (StepContext::recompute, train.recompute): SELECTIVE drops the FFNs'
// and experts' hidden rows from every block's Saved (TransformerBlock). FULL keeps, per block,
// only its input and the MoE state entering it (Activations::block_inputs); backward replays
// each block's forward from them, last block first, right before that block's backward, so one
// block's Saved is alive at a time. A replay makes the same routing decisions from the same
// inputs and weights (the same bits: the kernels are deterministic, every random draw is keyed
// by token), repeats its collectives (the MoE exchanges, a global scope's aux sums, global AC
// statistics) on every rank in the same block order, and accumulates nothing: no statistics
// block, no aux losses into the sums, no loss-free balancing load. With dropless routing each
// replayed MoE layer reads its exchanged counts again (one more sync per layer in backward).
//
// The loss in chunks (StepContext::loss_chunk_tokens, train.loss_chunk_tokens): the head, the
// cross-entropy and the head's backward run over chunks of that many rows in row order, so
// backward holds one chunk's logit gradient (computed in place over the logits when they are
// f32, the FP32 model's case); the head's weight gradient is summed chunk by chunk. A training
// forward keeps every chunk's logits under NONE; under SELECTIVE and FULL, when there is more
// than one chunk, it keeps only their lse and backward recomputes each chunk's logits from the
// head input by the same GEMM (the same bits), so one chunk's logits are alive at a time.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/layers/embedding.h"
#include "core/model/block.h"
#include "types/model_config.h"
#include "types/router_stats.h"

namespace moe {

// The discrete routing decisions of one MoE layer in one forward pass (device tensors on the
// model's context): what a comparison of two computation paths counts before it compares values
// (momoe-eval --routing-out, tests/testing/cross_path.h).
struct RoutingDecisions {
  Tensor experts;  // [N, K] i32: the chosen experts, top-1 first
  Tensor slot;     // [N, K] i32: each choice's capacity slot, -1 when dropped
  Tensor mask;     // [N, E] u8: SparseMixer's masked-softmax set; empty for other routers
};

class TransformerLM {
 public:
  enum LossSlot : int64_t { kLossSum = 0, kLossTokens, kAuxLoss, kLossSlots };

  // What FULL recomputation keeps of one block: its input and the MoE state entering it.
  struct BlockInput {
    Tensor h;  // [N, D] act
    MoeState state;
  };

  struct Activations {
    StepContext ctx;
    Tensor inputs, targets;  // i32 [B, S] on the device
    // Every block's Saved; empty under FULL recomputation, which keeps block_inputs instead.
    std::vector<TransformerBlock::Saved> blocks;
    std::vector<BlockInput> block_inputs;  // FULL recomputation: one per block
    LayerNorm::Saved final_ln;
    Tensor h_final;  // [N, D] head input
    // Each loss chunk's logits [rows, V] F, in row order; empty when backward recomputes them
    // (see "The loss in chunks" above). Backward overwrites them with their gradient under FP32.
    std::vector<Tensor> logits;
    Tensor lse;  // [N] F: logsumexp of each row of logits
  };

  // act: the activation dtype (f32, bf16, or f64 for gradient checks). ep_comm: nullable.
  static StatusOr<std::unique_ptr<TransformerLM>> create(const ModelConfig& cfg, Context* ctx,
                                                         DType act, comm::Communicator* ep_comm);

  // Deterministic initialisation from `seed`: every element is drawn from a counter keyed by the
  // parameter's name and its global index, so any EP layout gets the same global weights.
  // Matrices ~ N(0, init_std); biases (and loss-free balancing's score_bias) 0; LayerNorm gamma
  // 1; SparseMixer omega 1. Drawn on the
  // host by the CPU reference and copied to the context: the same bits on every device.
  Status init_parameters(uint64_t seed);

  // inputs, targets i32 [B, S] (host or device; targets -1 ignored). sums and stats as above
  // (stats may be empty).
  Status forward(const TensorView& inputs, const TensorView& targets, const StepContext& ctx,
                 Activations* acts, const TensorView& sums, const TensorView& stats);
  // Consumes *acts: each part is freed once its backward has run (the logits after the head's,
  // each block's saved tensors, or its kept input under FULL, after that block's), so memory
  // falls as backward proceeds.
  Status backward(Activations* acts, double ce_scale, double aux_scale);
  // After a step: every MoE layer with loss-free balancing moves its selection bias by the step's
  // global loads (apply), or only forgets them (a skipped step). Enqueued; no wait.
  Status update_score_biases(bool apply);
  // Evaluation-mode forward (no dropout, nothing kept): accumulates into sums (and stats). With
  // `routing`, appends each MoE layer's decisions, in layer order (nothing is read back).
  Status evaluate(const TensorView& inputs, const TensorView& targets, const StepContext& ctx,
                  const TensorView& sums, const TensorView& stats,
                  std::vector<RoutingDecisions>* routing = nullptr);
  // The next-token logits of every position of `inputs` i32 [B, S] (host or device), evaluation
  // mode (no dropout, nothing accumulated, no loss): [B * S, V] in the compute dtype (F32 for a
  // BF16 model) on this model's context (the caller reads back the rows it needs; text
  // generation reads one).
  StatusOr<Tensor> logits(const TensorView& inputs, const StepContext& ctx);
  // The argmax expert of every MoE layer for every token of `inputs` (evaluation mode): the probe
  // for the routing flip rate, dropping at the training capacity (no sync in capacity mode). One
  // [N] i32 device tensor per MoE layer.
  StatusOr<std::vector<Tensor>> route_probe(const TensorView& inputs, const StepContext& ctx);

  // The statistics buffer: the block of MoE layer l starts at stats_offset(l).
  int64_t stats_size() const { return stats_offsets_.back(); }
  int64_t stats_offset(int moe_layer) const { return stats_offsets_[moe_layer]; }
  int64_t moe_experts(int moe_layer) const { return moe_experts_[moe_layer]; }

  ParameterSet& params() { return *params_; }
  const ParameterSet& params() const { return *params_; }
  Context& context() { return ctx_; }
  const ModelConfig& config() const { return cfg_; }
  int num_moe_layers() const { return static_cast<int>(moe_experts_.size()); }
  const std::vector<std::unique_ptr<TransformerBlock>>& blocks() const { return blocks_; }

 private:
  TransformerLM(const ModelConfig& cfg, Context* ctx, DType act, comm::Communicator* ep_comm);
  Status forward_impl(const TensorView& inputs, const TensorView& targets, const StepContext& ctx,
                      Activations* acts, const TensorView& sums, const TensorView& stats,
                      std::vector<Tensor>* top1s);
  StatusOr<Tensor> embedding_dropout(const StepContext& ctx, const Tensor& h, bool backward);
  // The head and the loss over acts->h_final, chunk by chunk: lse, the sums (f64 [2] += loss,
  // counted rows) and the kept logits. The head's backward into a new dh [N, D] act.
  Status loss_forward(Activations* acts, const TensorView& ce_sums);
  StatusOr<Tensor> loss_backward(Activations* acts, double ce_scale);
  // FULL recomputation: block b's Saved rebuilt by replaying its forward from its kept input.
  Status replay_block(const Activations& acts, size_t b, TransformerBlock::Saved* saved);

  ModelConfig cfg_;
  Context& ctx_;
  std::unique_ptr<ParameterSet> params_;
  std::unique_ptr<Embedding> embed_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<LayerNorm> final_ln_;  // pre-LN only
  std::unique_ptr<OutputHead> head_;
  std::vector<int64_t> moe_experts_;    // per MoE layer
  std::vector<int64_t> stats_offsets_;  // [num MoE layers + 1]
};

}  // namespace moe
