// Gradient reduction for EP x DP, in place on the ParameterSet's gradient arenas (no packing):
// dense gradients are summed over the world (every rank holds a replica), expert gradients over
// the DP group (the ranks holding the same expert shard): one all-reduce per kind. Also the
// squared gradient norm, on the device, for clipping and the non-finite check.
#pragma once

#include "comm/communicator.h"
#include "core/layers/parameters.h"

namespace moe {

// world and dp may be null (one rank / no DP replicas). Stream-ordered on the params' context.
Status all_reduce_gradients(ParameterSet* params, comm::Communicator* world,
                            comm::Communicator* dp);
// out f64 [2] (accumulated): out[0] += the sum of squares of the dense gradients, out[1] += that
// of this rank's expert shards. After all_reduce_gradients the dense part is the same on every
// rank; the global norm is sqrt(out[0] + the sum of out[1] over the EP group).
Status gradient_squares(ParameterSet* params, const TensorView& out);

}  // namespace moe
