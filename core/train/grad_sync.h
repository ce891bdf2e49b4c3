// Gradient reduction for EP x DP, in place on the ParameterSet's gradient arenas (no packing):
// dense gradients are summed over the world (every rank holds a replica), expert gradients over
// the DP group (the ranks holding the same expert shard): one collective per kind, an all-reduce,
// or under the distributed optimizer (core/optim/state_sharding.h) a reduce-scatter into this
// rank's chunk. Also the squared gradient norm, on the device, for clipping and the non-finite
// check: from the chunks of a sharded kind, the same bits as from the whole reduced arena.
#pragma once

#include "comm/communicator.h"
#include "core/layers/parameters.h"
#include "core/optim/state_sharding.h"

namespace moe {

// Sums each kind's gradients over its group (world and dp may be null: one rank / no DP
// replicas). A kind that `sharding` shards is reduce-scattered over its shard's group:
// afterwards its chunk [begin, end) holds the sum and the rest of the arena this rank's own
// gradients (stale: nothing reads them); all-reduced whole instead where the group's
// reduce_scatter would sum in another order (ArenaShard::exact_reduce_scatter: NCCL beyond 2
// ranks), so the chunk's sums are the replicated optimizer's. The others are all-reduced.
// Stream-ordered on the params' context.
Status reduce_gradients(ParameterSet* params, comm::Communicator* world, comm::Communicator* dp,
                        const StateSharding& sharding);
// out f64 [2] (accumulated), after reduce_gradients: out[0] += the sum of squares of the dense
// gradients, out[1] += that of this rank's expert shards. The dense part is the same on every
// rank; the global norm is sqrt(out[0] + the sum of out[1] over the EP group). For a sharded kind
// it is put together from the chunks in a fixed order (collective over its group), bit for bit
// the sum over the whole reduced arena (kernels/optimizer.h kSquaresBlock).
Status gradient_squares(ParameterSet* params, const StateSharding& sharding, const TensorView& out);

}  // namespace moe
