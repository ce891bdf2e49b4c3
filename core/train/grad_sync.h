// Gradient reduction for EP x DP: dense gradients are summed over the world (every rank holds a
// replica), expert gradients over the DP group (the ranks holding the same expert shard). Both
// are packed into one buffer per group so that each is a single all-reduce. Also the global
// gradient norm, which counts every expert shard once.
#pragma once

#include "comm/communicator.h"
#include "core/layers/parameters.h"

namespace moe {

// world and dp may be null (one rank / no DP replicas).
Status all_reduce_gradients(ParameterSet* params, comm::Communicator* world,
                            comm::Communicator* dp);
// sqrt(sum of dense squares + sum over the EP group of expert-shard squares). Call after
// all_reduce_gradients: dense gradients are then identical everywhere. ep may be null.
StatusOr<double> global_grad_norm(const ParameterSet& params, comm::Communicator* ep);
// Multiplies every gradient by `scale`.
Status scale_gradients(ParameterSet* params, double scale);

}  // namespace moe
