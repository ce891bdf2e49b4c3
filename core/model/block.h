// One transformer block: attention sublayer, then a dense FFN or MoE sublayer, in the reference
// code's post-LN double-residual form or pre-LN (types/model_config.h BlockStyle). The MoE
// residual state (momentum p, previous top-1) enters and leaves every block; dense blocks pass it
// through unchanged. Every sublayer returns new tensors (the Context's allocator makes that
// cheap), so what a sublayer saved for the backward is never overwritten and nothing is copied.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/layers/attention.h"
#include "core/layers/dense_ffn.h"
#include "core/layers/layer_norm.h"
#include "core/layers/moe_layer.h"
#include "core/layers/rng_streams.h"
#include "types/model_config.h"
#include "types/run_config.h"

namespace moe {

// Residual-dynamics state threaded through the MoE layers of one forward pass: the momentum state
// p [N, D] F (empty = zero, before the first MoE layer) and the previous MoE layer's argmax expert
// top1 [N] i32 (empty before the first MoE layer). The Adam moments live only inside the first
// MoE layer (AdamSMoE is only ever the first, and starts from zero), so they are not threaded.
struct MoeState {
  Tensor p;
  Tensor top1;
};

// dL/dp flowing backwards; empty means zero.
struct MoeStateGrad {
  Tensor d_p;
};

struct StepContext {
  int64_t batch = 0;            // sequences in this micro-batch
  int64_t sequence_offset = 0;  // global index of sequence 0 (keys every random draw)
  int64_t seq_len = 0;
  int64_t step = 0;
  uint64_t seed = 0;
  // A step kept in device memory (a training step recorded in a CUDA graph: the trainer writes
  // [step, its first global sequence] there before each step). Then `step` is 0 and
  // sequence_offset counts from the step's first sequence; the draws are those of the host's
  // step and full offset (rng_streams.h).
  DeviceStep device_step;
  bool training = true;
  // With training off: drop at the training capacity anyway instead of the eval capacity (the
  // routing probe, which runs inside a training step and must not add a dropless sync to it).
  bool training_capacity = false;
  comm::Communicator* stats_comm = nullptr;  // global AC statistics and aux losses
  // train.recompute: what a training forward keeps for backward (types/run_config.h; evaluation
  // keeps everything it is asked for).
  Recompute recompute = Recompute::kNone;
  // FULL recomputation's re-run of a block's forward in backward, rebuilding its Saved: the same
  // decisions and values, and nothing counted twice (MoeLayerInputs::replay).
  bool replay = false;
  // train.loss_chunk_tokens: the loss's rows per chunk (0: all at once; TransformerLM).
  int64_t loss_chunk_tokens = 0;
  int64_t token_offset() const { return sequence_offset * seq_len; }
  // The random stream of `site` in `block` at this step, keyed by tokens (or by sequences:
  // attention's mask).
  CounterRng rng(RandomSite site, int64_t block, bool sequence_keys = false) const {
    return site_rng(seed, site, block, step, device_step, sequence_keys ? 1 : seq_len);
  }
  // SELECTIVE in training: the FFNs' and experts' hidden rows are recomputed in backward.
  bool recompute_hidden() const { return training && recompute == Recompute::kSelective; }
  // FULL in training: each block keeps only its input; backward replays its forward.
  bool recompute_blocks() const { return training && recompute == Recompute::kFull; }
};

class TransformerBlock {
 public:
  struct Saved {
    MultiHeadAttention::Saved attn;
    LayerNorm::Saved ln1, ln2, ln_in;
    DenseFfn::Saved ffn;
    MoeLayerSaved moe;
  };

  TransformerBlock(int index, const ModelConfig& model, const BlockPlan& plan, int moe_index,
                   ParameterSet* params, comm::Communicator* ep_comm);

  // Returns the block output for h [N, D]; state updated (MoE blocks). stats: the MoE layer's
  // statistics block (f64), or empty. Under ctx.recompute_hidden() the FFN's or experts' hidden
  // rows are not kept in `saved` (their backward recomputes them). A replay (ctx.replay, FULL
  // recomputation) with the block's kept input and entering state rebuilds the same `saved`.
  StatusOr<Tensor> forward(const StepContext& ctx, const Tensor& h, MoeState* state, Saved* saved,
                           const TensorView& stats) const;
  // Returns dL/d(block input) for dh = dL/d(block output); state gradients updated in place.
  // aux_scale: dL/d(aux loss).
  StatusOr<Tensor> backward(const StepContext& ctx, const Saved& saved, double aux_scale,
                            const Tensor& dh, MoeStateGrad* state_grad) const;

  bool is_moe() const { return moe_ != nullptr; }
  MoeLayer* moe() const { return moe_.get(); }

 private:
  // Residual dropout keyed by the global token id: a new tensor, or x itself when inactive.
  StatusOr<Tensor> residual_dropout(const StepContext& ctx, RandomSite site, const Tensor& x,
                                    bool backward) const;
  // a + b into a new tensor.
  StatusOr<Tensor> sum(const Tensor& a, const Tensor& b) const;

  Context& ctx_;
  int index_;
  BlockStyle style_;
  double dropout_;
  MultiHeadAttention attn_;
  LayerNorm ln1_;
  LayerNorm ln2_;
  std::unique_ptr<LayerNorm> ln_in_;  // post-LN MoE blocks: the inner LN of the double residual
  std::unique_ptr<DenseFfn> ffn_;
  std::unique_ptr<MoeLayer> moe_;
};

}  // namespace moe
