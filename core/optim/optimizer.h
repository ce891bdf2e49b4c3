// AdamW or SGD over a ParameterSet's full-precision masters. The state lives in arenas laid out
// like the masters (one per kind and slot), so a parameter's state is Parameter::slice_of(arena)
// and checkpoints save it by name ("<param>.adam_m", "<param>.adam_v", "<param>.momentum").
// Weight decay applies only to parameters registered with weight_decay (matrices, not biases,
// norms or scales). After an update the working copies (bf16 under BF16) are refreshed.
//
// Under the distributed optimizer (core/optim/state_sharding.h) the state arena of a sharded kind
// covers this rank's chunk of the masters arena only: step() updates that chunk (its gradients
// reduced by core/train/grad_sync.h) and all-gathers the masters over the kind's group; the
// checkpoint code reads and writes the state whole (whole_state, load_state). When the kind's
// masters are sharded too (BF16, ParameterSet::shard_masters), step() gathers them into the
// kind's gradients arena (dead after the update) and refreshes every value from there; the
// checkpoint code reads and writes them whole as well (whole_masters, load_masters).
#pragma once

#include <string>
#include <vector>

#include "core/layers/parameters.h"
#include "core/optim/state_sharding.h"
#include "types/run_config.h"

namespace moe {

class Optimizer {
 public:
  struct StateTensor {
    std::string name;  // "<param>.<slot name>"
    const Parameter* param;
    int slot;          // 0: AdamW m or SGD momentum; 1: AdamW v
    TensorView value;  // on the device, same shape as the parameter; empty when sharded
  };

  // sharding (copied; its groups borrowed): where each kind's state lives; null keeps every
  // kind's state whole on this rank (unsharded_state).
  static StatusOr<std::unique_ptr<Optimizer>> create(const OptimizerConfig& cfg,
                                                     ParameterSet* params,
                                                     const StateSharding* sharding = nullptr);
  // One update at learning rate `lr`; `step` counts completed updates before this one
  // (0-based). Gradients are multiplied by grad_scale (clipping) on the way in. Collective over
  // the groups of the sharded kinds (the masters' all-gather).
  Status step(double lr, int64_t step, double grad_scale = 1.0);
  std::vector<StateTensor> state_tensors() const;
  // The state arena of one slot and kind (empty when the optimizer has no such slot): the
  // elements [sharding().of(kind).begin(), end()) of the masters arena's layout.
  const Tensor& state(int slot, ParamKind kind) const {
    return state_[slot][kind == ParamKind::kDense ? 0 : 1];
  }
  // Where a sharded kind's gathered arena lands: on every rank of its group, or on the group's
  // first rank alone (the checkpoint's writer of that kind; the others then get an empty tensor
  // and never hold a whole arena).
  enum class GatherTo { kEveryRank, kFirstRank };
  // One slot and kind's whole state on the host, laid out like the masters arena (numel(kind)
  // elements, no padding): gathered from the chunks when the kind is sharded (collective over
  // its group; `to` says which ranks get it), else read back. A sync point.
  StatusOr<Tensor> whole_state(int slot, ParamKind kind, GatherTo to = GatherTo::kEveryRank) const;
  // Sets one slot and kind's state from `whole` (host, laid out like the masters arena, at least
  // numel(kind) elements): this rank's chunk of it. Local; enqueued (keep `whole` alive until
  // the context synchronizes).
  Status load_state(int slot, ParamKind kind, const TensorView& whole);
  // One kind's whole masters on the host, laid out like the masters arena (numel(kind)
  // elements): gathered from the chunks when they are sharded (collective over the kind's group;
  // `to` says which ranks get them), else read back. A sync point.
  StatusOr<Tensor> whole_masters(ParamKind kind, GatherTo to = GatherTo::kEveryRank) const;
  // Sets one kind's masters and values from `whole` (host, F, laid out like the masters arena,
  // at least numel(kind) elements): this rank's chunk of them when sharded (the values are then
  // refreshed through the kind's gradients arena, overwriting the gradients), else all of them
  // (the working copies are left to ParameterSet::refresh_working). Local; enqueued.
  Status load_masters(ParamKind kind, const TensorView& whole);
  int slots() const;
  const OptimizerConfig& config() const { return cfg_; }
  const StateSharding& sharding() const { return sharding_; }

 private:
  Optimizer(const OptimizerConfig& cfg, ParameterSet* params, const StateSharding& sharding)
      : cfg_(cfg), params_(params), sharding_(sharding) {}
  // Updates the part of `p` in this rank's chunk of its kind.
  Status update(const Parameter& p, double lr, int64_t step, double grad_scale);
  // This rank's chunk of a sharded kind (on the host, `mine`) gathered into the whole arena's
  // layout: numel(kind) elements (an empty tensor where `to` leaves this rank out). Collective
  // over the kind's group.
  StatusOr<Tensor> gather_on_host(ParamKind kind, const Tensor& mine, GatherTo to) const;
  // After the update: each sharded kind's masters all-gathered, the values refreshed.
  Status gather_masters();

  OptimizerConfig cfg_;
  ParameterSet* params_;
  StateSharding sharding_;
  Tensor state_[2][2];  // [slot][kind]
};

}  // namespace moe
