// The distributed optimizer's layout (ZeRO stage 1, train.distributed_optimizer): the optimizer
// state of each parameter kind is cut over the ranks that hold the same parameters, its
// data-parallel replicas (comm/process_groups.h): dense parameters over the world, each expert
// shard over its DP group. Rank r of a group of R owns the contiguous elements
// [r * chunk, (r + 1) * chunk) of its kind's arenas (ParameterSet::masters and grads), which are
// padded with zeros to R * chunk elements; its optimizer state covers just that chunk. Under
// BF16 (some values are bf16 working copies) so do its fp32 masters (ParameterSet::shard_masters):
// the bf16 working copies stay whole, and the parameters that compute in fp32 (norms, biases,
// score_bias) keep a whole fp32 copy of their master as their value. Under FP32 every value is
// its master, so the masters stay whole.
//
// One step under it: the gradients are reduce-scattered (each rank receives the sum of its chunk,
// core/train/grad_sync.h), the gradient norm is put together from the chunks, each rank updates
// its chunk of the masters, and the masters are all-gathered and the working copies refreshed
// (core/optim/optimizer.h); sharded masters are gathered into the gradients arena, dead until the
// next step's zero_grads(), and every value refreshed from there. Every element sees the
// replicated optimizer's arithmetic: a reduce-scatter sums in the all-reduce's order
// (comm/communicator.h) and a chunk is a whole number of the norm's blocks (kernels/optimizer.h,
// kSquaresBlock), so the weights are the replicated optimizer's, bit for bit.
//
// Memory per rank: the state of `chunk` elements per kind and slot instead of the whole arena's,
// plus the arenas' padding (under R x kSquaresBlock elements per kind); under BF16 also `chunk`
// fp32 masters per kind instead of the whole arena, plus the fp32 values of the parameters that
// are not GEMM operands. A chunk is at least one block, so a kind of at most kSquaresBlock
// elements gains nothing.
#pragma once

#include <algorithm>
#include <cstdint>

#include "comm/communicator.h"
#include "core/layers/parameters.h"

namespace moe {

// How one kind's arenas are cut. Unsharded (one rank holds it all): ranks 1, chunk == numel.
struct ArenaShard {
  comm::Communicator* group = nullptr;  // the kind's DP replicas (borrowed); null: unsharded
  int ranks = 1;                        // the group's size
  int rank = 0;                         // this rank's place in it
  int64_t numel = 0;                    // the kind's parameters (ParameterSet::numel)
  int64_t chunk = 0;                    // elements per rank
  // The group's reduce_scatter sums as its all_reduce does (Communicator::
  // reduce_scatter_matches_all_reduce); else the gradients are all-reduced whole, so that the
  // chunk holds the replicated optimizer's sums bit for bit (NCCL beyond 2 ranks).
  bool exact_reduce_scatter = true;

  bool sharded() const { return ranks > 1; }
  int64_t begin() const { return rank * chunk; }
  int64_t end() const { return begin() + chunk; }
  // The end of the parameters in [begin, end): the rest of the chunk is padding.
  int64_t data_end() const { return std::clamp(numel, begin(), end()); }
};

struct StateSharding {
  ArenaShard dense, expert;
  const ArenaShard& of(ParamKind kind) const { return kind == ParamKind::kDense ? dense : expert; }
};

// Elements per rank for an arena of `numel` cut over `ranks`: ceil(numel / (ranks x
// kSquaresBlock)) x kSquaresBlock; numel itself when ranks <= 1 or numel == 0 (unsharded).
int64_t shard_chunk(int64_t numel, int ranks);

// The layout that keeps every kind whole on every rank (the replicated optimizer).
StateSharding unsharded_state(const ParameterSet& params);

// The layout over `world` (dense parameters) and `dp` (expert shards), each borrowed; either may
// be null or of one rank (that kind stays whole). Pads the arenas of `params` to R x chunk
// (ParameterSet::pad_arenas) and, when its act dtype is not its master dtype (BF16), keeps this
// rank's chunk of each sharded kind's masters (ParameterSet::shard_masters): after the
// parameters are initialised. Local: every rank of a group computes the same chunk.
StatusOr<StateSharding> shard_optimizer_state(ParameterSet* params, comm::Communicator* world,
                                              comm::Communicator* dp);

}  // namespace moe
