// The per-element formulas of RoPE (kernels/rope.h), in double: shared by the CPU backend and the
// CUDA kernel (MOE_HOST_DEVICE), so both evaluate the same expressions in the same order.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/dtype.h"  // MOE_HOST_DEVICE

namespace moe::kernels::ref {

// The angle of pair i (of head_dim / 2) at position pos: pos * base^(-2i / head_dim) radians.
MOE_HOST_DEVICE inline double rope_angle(int64_t pos, int64_t i, int64_t head_dim, double base) {
  const double inv_freq = pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  return static_cast<double>(pos) * inv_freq;
}

// Turns the pair (x0, x1) = (x_i, x_{i+Dh/2}) by the angle whose cosine and sine are (c, s): the
// forward passes sin, the backward (the transpose) -sin.
struct RopePair {
  double y0, y1;
};
MOE_HOST_DEVICE inline RopePair rope_turn(double x0, double x1, double c, double s) {
  return {x0 * c - x1 * s, x1 * c + x0 * s};
}

}  // namespace moe::kernels::ref
