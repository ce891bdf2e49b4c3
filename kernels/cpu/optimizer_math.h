// The per-element optimizer math shared by the CPU loop (kernels/cpu/optimizer_ref.cc) and
// the CUDA kernel (kernels/cuda/optimizer.cu), so that both compute the same expressions.
#pragma once

#include "base/dtype.h"  // MOE_HOST_DEVICE
#include "kernels/optimizer.h"

namespace moe::kernels::ref {

// SGD's step direction for one element (see SgdArgs): g' = grad_scale grad + wd param, then with
// momentum buf' = first_step ? g' : momentum buf + g'. The caller stores it in the momentum buffer
// (when momentum > 0) and subtracts lr times it from the parameter.
MOE_HOST_DEVICE inline double sgd_direction(const SgdArgs& a, double grad, double param,
                                            double buf) {
  const double d = a.grad_scale * grad + a.weight_decay * param;
  return (a.momentum > 0 && !a.first_step) ? a.momentum * buf + d : d;
}

}  // namespace moe::kernels::ref
