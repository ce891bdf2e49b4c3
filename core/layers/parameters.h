// Named parameters with their gradients. A model owns one ParameterSet; every layer registers its
// tensors at construction and keeps Parameter pointers. Names are stable, dotted paths
// ("blocks.3.moe.w1") and are the tensor names in checkpoints.
//
// Precision (train.precision): the set is created for an activation dtype `act` (f32, bf16, or
// f64 in gradient tests). Master weights and gradients are full precision, F = compute_dtype(act);
// a parameter registered as a matrix-product operand (`matmul`) gets a working copy in `act` when
// act != F (bf16 weights for bf16 GEMMs), refreshed from the master after every update. Layers
// compute with `value`, accumulate into `grad`; the optimizer updates `master`; checkpoints store
// masters (fp32 safetensors whatever the precision).
//
// Memory: after every layer registered, allocate() lays the masters and the gradients out in
// contiguous arenas per kind, dense parameters first and expert shards after, so the gradient
// all-reduce of each kind is one collective on one view, in place. Working copies share one more
// arena, each starting on a kWorkingAlign-element boundary (the GEMM operands of a GPU then sit
// on 256-byte boundaries, which cuBLAS's fastest bf16 kernels want, whatever the shapes). Expert
// parameters are sharded over the EP group: a rank holds experts [first_expert, first_expert +
// local_experts) of `global_experts`, stacked along dimension 0.
//
// Sharded masters (the distributed optimizer under BF16, core/optim/state_sharding.h): a rank
// may keep only its chunk of a kind's masters arena (shard_masters). The kind's parameters then
// have no `master` view; the working copies stay whole, and the parameters that compute with
// their master (not `matmul`: norms, biases, score_bias) get their own whole F copy as `value`.
// The optimizer updates the chunk and puts the masters back together to refresh every value.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "base/context.h"
#include "base/tensor.h"

namespace moe {

// Working copies start every this many elements into their arena (256 bytes of bf16).
constexpr int64_t kWorkingAlign = 128;
// The elements a working copy of n elements spans in its arena, up to the next one.
inline int64_t working_span(int64_t n) {
  return (n + kWorkingAlign - 1) / kWorkingAlign * kWorkingAlign;
}

enum class ParamKind {
  kDense,   // replicated on every rank; gradients all-reduced over the world
  kExpert,  // one shard per EP rank, [local_experts, ...]; gradients all-reduced over the DP group
};

struct Parameter {
  std::string name;
  ParamKind kind = ParamKind::kDense;
  bool weight_decay = true;  // AdamW decays matrices, not biases, norms or scales
  bool matmul = false;       // a GEMM operand: working copy in the activation dtype
  Shape shape;
  // Views into the set's arenas (valid after ParameterSet::allocate()).
  TensorView master;  // F: updated by the optimizer, stored by checkpoints; empty when its
                      // kind's masters are sharded (ParameterSet::shard_masters)
  TensorView value;   // what layers compute with: `master`, or its working copy (or, with
                      // sharded masters and not `matmul`, a whole F copy of the master)
  TensorView grad;    // F: accumulated (+=) by backward, zeroed by zero_grads()
  // kExpert only: where this shard sits in the global [global_experts, ...] tensor.
  int64_t global_experts = 0;
  int64_t first_expert = 0;
  // Element offset of master and grad in their kind's arena (ParameterSet::masters(kind)); any
  // tensor laid out like the arena (optimizer state, a host copy) has the parameter there too.
  int64_t arena_offset = 0;
  int64_t numel() const { return shape.numel(); }
  // This parameter's slice of a tensor laid out like its kind's arena.
  TensorView slice_of(const TensorView& arena) const {
    return arena.rows(arena_offset, arena_offset + numel()).reshape(shape);
  }
};

// The bytes the allocator holds for `t`: its bytes rounded up to the host allocator's bucket
// (base/allocator.h) on the host; its bytes on a device.
int64_t held_bytes(const Tensor& t);

class ParameterSet {
 public:
  // act: f32, f64 or bf16 (see above). ctx: where the arenas live (borrowed).
  ParameterSet(Context* ctx, DType act);
  ParameterSet(const ParameterSet&) = delete;
  ParameterSet& operator=(const ParameterSet&) = delete;

  // Registers a parameter (no memory yet). Aborts on a duplicate name or after allocate()
  // (programmer errors). The returned reference stays valid for the set's lifetime.
  Parameter& add(const std::string& name, Shape shape, ParamKind kind = ParamKind::kDense,
                 bool weight_decay = true, bool matmul = false);
  Parameter& add_expert(const std::string& name, Shape local_shape, int64_t global_experts,
                        int64_t first_expert, bool weight_decay = true, bool matmul = false);
  // Allocates the arenas (masters and gradients zeroed). Once, after every layer registered.
  Status allocate();
  // Pads the masters and gradients arenas of `kind` with zeros up to a multiple of `multiple`
  // elements (>= 1), for collectives that cut an arena into equal chunks (the distributed
  // optimizer, core/optim/state_sharding.h). After allocate(), between steps: both arenas are
  // allocated anew, the masters' values kept, the gradients zeroed, and every view re-pointed.
  // Nothing reads or writes the padding but those collectives, so it stays zero.
  Status pad_arenas(ParamKind kind, int64_t multiple);
  // Keeps only the elements [begin, begin + chunk) of `kind`'s masters arena on this rank (the
  // distributed optimizer under BF16: this rank's chunk, after pad_arenas()). Only when some
  // values are working copies (act != F); between steps, once. The parameters of `kind` that
  // compute with their master get a whole F copy of it as `value` (one more arena), then every
  // master view of `kind` is emptied and the arena shrinks to the chunk.
  Status shard_masters(ParamKind kind, int64_t begin, int64_t chunk);
  bool allocated() const { return allocated_; }

  // nullptr when absent.
  Parameter* find(const std::string& name);
  const Parameter* find(const std::string& name) const;
  const std::vector<std::unique_ptr<Parameter>>& all() const { return params_; }
  DType act_dtype() const { return act_; }
  DType master_dtype() const { return compute_dtype(act_); }
  Context& context() const { return *ctx_; }
  int64_t numel() const;  // local element count
  int64_t numel(ParamKind kind) const;

  // The contiguous masters or gradients of one kind (empty when the kind has none): numel(kind)
  // elements, then the zero padding pad_arenas() may have added. Sharded masters: the chunk
  // alone, elements [masters_begin(kind), + chunk) of that layout.
  const Tensor& masters(ParamKind kind) const { return masters_[index(kind)]; }
  bool masters_sharded(ParamKind kind) const { return masters_begin_[index(kind)] >= 0; }
  // The arena element at which masters(kind) starts: 0, or the chunk's first once sharded.
  int64_t masters_begin(ParamKind kind) const {
    return std::max<int64_t>(0, masters_begin_[index(kind)]);
  }
  // The bytes of the masters arenas, the sharded masters' F values and the working copies, as the
  // allocator holds them (held_bytes).
  int64_t parameter_bytes() const;
  const Tensor& grads(ParamKind kind) const { return grads_[index(kind)]; }
  // Zeroes every gradient (one memset per arena).
  Status zero_grads();
  // Copies the masters into the working copies (after an optimizer step, an initialisation or a
  // checkpoint load). No-op when every value is its master. Skips a kind whose masters are
  // sharded (refresh_values).
  Status refresh_working();
  // Sets every value of `kind` from `whole` (on the device, F, laid out like the masters arena,
  // at least numel(kind) elements): the working copies converted, the F values copied. Only for
  // a kind whose masters are sharded, once they are put together (after an update or a load).
  Status refresh_values(ParamKind kind, const TensorView& whole);
  // After a write to the value of a parameter that computes with its master (not `matmul`, e.g.
  // loss-free balancing's score_bias): copies the part of it in this rank's chunk into the
  // master. No-op unless its kind's masters are sharded (the value is then the master itself).
  Status store_value(const Parameter& p);

 private:
  static int index(ParamKind kind) { return kind == ParamKind::kDense ? 0 : 1; }
  bool has_working(const Parameter& p) const { return p.matmul && act_ != master_dtype(); }

  Context* ctx_;
  DType act_;
  bool allocated_ = false;
  std::vector<std::unique_ptr<Parameter>> params_;
  Tensor masters_[2], grads_[2];
  int64_t masters_begin_[2] = {-1, -1};  // -1: whole; else the chunk's first element
  Tensor values_[2];                     // sharded masters: the F values (not `matmul`)
  Tensor working_;
};

}  // namespace moe
