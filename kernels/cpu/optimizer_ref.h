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
// *total += sum of x[i]^2: blocks of kSquaresBlock elements, each summed by
// block_sum_of_squares, added in block order (kernels/optimizer.h).
template <typename T>
void accumulate_sum_of_squares(const T* x, int64_t n, double* total);
// The sum of squares of x[begin, end) as accumulate_sum_of_squares sums one block.
template <typename T>
double block_sum_of_squares(const T* x, int64_t begin, int64_t end);
// out[b] = block_sum_of_squares of block b of x[0, n), for b < ceil(n / kSquaresBlock).
template <typename T>
void sum_of_squares_blocks(const T* x, int64_t n, double* out);
// *total += (((0 + x[0]) + x[1]) + ...) + x[n - 1].
void accumulate_in_order(const double* x, int64_t n, double* total);

}  // namespace moe::kernels::ref
