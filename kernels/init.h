// Deterministic parameter initialisation (the model initialises, layers do not). Element i of a
// tensor is a pure function of (rng, first_index + i), so the same stream gives the same values on
// every rank and in any order, and a shard that passes its global element offset as first_index
// gets exactly its slice of the unsharded tensor.
#pragma once

#include <cstdint>

#include "base/context.h"
#include "base/rng.h"
#include "base/tensor.h"

namespace moe::kernels {

// t[i] = stddev * rng.normal(first_index + i). t: any float dtype; stddev >= 0.
Status init_normal(Context& ctx, const TensorView& t, double stddev, CounterRng rng,
                   uint64_t first_index = 0);
// t[i] = value. t: any float dtype.
Status init_constant(Context& ctx, const TensorView& t, double value);

}  // namespace moe::kernels
