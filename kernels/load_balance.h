// Loss-free load balancing (DeepSeek-V3, "Auxiliary-Loss-Free Load Balancing"): every MoE layer
// keeps a per-expert bias that is added to the router scores to choose experts, never to the
// gates, and after every step moves each expert toward the mean load by a fixed rate:
//   bias[e] += rate * sign(mean_e' load[e'] - load[e])   (sign(0) = 0),
// with load the step's assignments per expert (before capacity) over the global batch. The load
// is the same on every rank, and the update is exact double arithmetic in a fixed order, so the
// bias stays identical on every rank and on every device.
#pragma once

#include "base/context.h"
#include "base/tensor.h"

namespace moe::kernels {

// load f64 [E] (the global step's assignments per expert); rate >= 0; bias [E] F (f32 or f64),
// updated in place.
Status score_bias_update(Context& ctx, const TensorView& load, double rate, const TensorView& bias);

}  // namespace moe::kernels
