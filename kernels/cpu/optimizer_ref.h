// Plain C++ optimiser updates (the CPU backend); see kernels/optimizer.h for the equations.
// Arithmetic in double, stored in T = float or double.
#pragma once

#include <cstdint>

#include "kernels/optimizer.h"

namespace moe::kernels::ref {

template <typename T>
void adamw_step(const AdamWArgs& args, int64_t n, T* param, const T* grad, T* m, T* v);
// buf may be nullptr when args.momentum == 0.
template <typename T>
void sgd_step(const SgdArgs& args, int64_t n, T* param, const T* grad, T* buf);
// *total += sum of x[i]^2, accumulated element by element into the running double total.
template <typename T>
void accumulate_sum_of_squares(const T* x, int64_t n, double* total);

}  // namespace moe::kernels::ref
