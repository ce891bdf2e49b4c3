// Plain C++ activation (elementwise and SwiGLU), bias and dropout loops (the CPU backend); see
// kernels/activation.h for the contracts. The per-element activation formulas are in
// activation_math.h (shared with the CUDA kernels). T, A = float, double or bf16 (activations); F =
// compute_dtype(A) = float or double (biases and bias gradients).
#pragma once

#include <cstdint>

#include "base/rng.h"
#include "kernels/activation.h"
#include "kernels/expert_blocks.h"

namespace moe::kernels::ref {

// y[i] = act(x[i]) for i < n; y may alias x.
template <typename T>
void activation_forward(Activation act, const T* x, int64_t n, T* y);
// dx[i] = act'(x[i]) * dy[i] for i < n; dx may alias dy.
template <typename T>
void activation_backward(Activation act, const T* x, const T* dy, int64_t n, T* dx);

// x [m, 2f] rows of [gate | up]: y [m, f] = silu(gate) * up.
template <typename T>
void swiglu_forward(const T* x, int64_t m, int64_t f, T* y);
// dx [m, 2f] = [dy * up * silu'(gate) | dy * silu(gate)] for dy [m, f].
template <typename T>
void swiglu_backward(const T* x, const T* dy, int64_t m, int64_t f, T* dx);

// x, y [m, n] (y may alias x): y[r, :] = sigmoid(logit[r]) x[r, :].
template <typename A, typename F>
void sigmoid_gate_forward(const A* x, const F* logit, int64_t m, int64_t n, A* y);
// dx[r, :] = s dy[r, :] (dx may alias dy); dlogit[r] = s (1 - s) sum_j dy[r, j] x[r, j] in
// double, column order; s = sigmoid(logit[r]).
template <typename A, typename F>
void sigmoid_gate_backward(const A* x, const F* logit, const A* dy, int64_t m, int64_t n, A* dx,
                           A* dlogit);

// x [m, n]: x[r, :] += bias[:] for every row. In place.
template <typename A, typename F>
void add_bias(A* x, int64_t m, int64_t n, const F* bias);
// dy [m, n]: dbias[:] += column sums of dy (in double, row order, added to dbias once).
template <typename A, typename F>
void bias_grad(const A* dy, int64_t m, int64_t n, F* dbias);
// x [rows, n], bias [E_l, n]: the filled rows of block b get bias[expert_of(b), :]; its padding
// rows are set to zero.
template <typename A, typename F>
void add_bias_blocks(const ExpertBlocks& blocks, A* x, int64_t n, const F* bias);
// dy [rows, n], dbias [E_l, n]: dbias[l, :] += sum over the filled rows of l's blocks of dy, in
// double, in this order: block by block (rank order), each block's rows in chunks of
// kBiasGradChunk from its first row, each chunk summed from zero in row order and added to the
// total in chunk order. The CUDA kernels sum each (chunk, column) on a thread of its own and then
// the chunks in that order, so both give the same bits.
inline constexpr int64_t kBiasGradChunk = 256;
template <typename A, typename F>
void bias_grad_blocks(const ExpertBlocks& blocks, const A* dy, int64_t n, F* dbias);

// Inverted dropout of x [m, n] into y (y may alias x), the mask of kernels/activation.h: row r's
// key is row_keys[r] when row_keys is not null, else key_base + r; a negative key zeroes the row.
// p in [0, 1); p = 0 copies.
template <typename T>
void dropout(const T* x, int64_t m, int64_t n, const int64_t* row_keys, int64_t key_base,
             const CounterRng& rng, float p, T* y);

}  // namespace moe::kernels::ref
