// Plain C++ residual loops (the CPU backend); see kernels/residual.h for the forms and the
// contracts. The per-element formulas are those of residual_math.h (shared with the CUDA kernel);
// these loops only read, widen to double, call them and store. All arrays hold n elements.
// A = float, double or bf16 (activations); F = compute_dtype(A) (the states and their gradients).
#pragma once

#include <cstdint>

#include "kernels/residual.h"

namespace moe::kernels::ref {

// residual_forward's arrays. The optional inputs (p_in; m_in, v_in) may be nullptr (read as 0);
// m_in, v_in, m_out, v_out are used for ResidualForm::kAdam only (m_out, v_out required there).
template <typename A, typename F>
struct ResidualForwardPtrs {
  const A* x = nullptr;
  const A* u = nullptr;
  const F* p_in = nullptr;
  const F* m_in = nullptr;
  const F* v_in = nullptr;
  A* out = nullptr;
  F* p_out = nullptr;
  F* m_out = nullptr;
  F* v_out = nullptr;
};

// residual_backward's arrays. The incoming gradients d_p_out, d_m_out, d_v_out may be nullptr
// (read as 0), and so may m_out, v_out outside kAdam; d_m_in, d_v_in are written where not
// nullptr. d_out, u, dx, du and d_p_in are required.
template <typename A, typename F>
struct ResidualBackwardPtrs {
  const A* d_out = nullptr;
  const F* d_p_out = nullptr;
  const F* d_m_out = nullptr;
  const F* d_v_out = nullptr;
  const A* u = nullptr;
  const F* m_out = nullptr;
  const F* v_out = nullptr;
  A* dx = nullptr;
  A* du = nullptr;
  F* d_p_in = nullptr;
  F* d_m_in = nullptr;
  F* d_v_in = nullptr;
};

// out, p_out (and m_out, v_out for kAdam) from x, u and the incoming states.
template <typename A, typename F>
void residual_forward(const ResidualArgs& args, int64_t n, const ResidualForwardPtrs<A, F>& p);
// dx, du, d_p_in (and d_m_in, d_v_in where given) overwritten.
template <typename A, typename F>
void residual_backward(const ResidualArgs& args, int64_t n, const ResidualBackwardPtrs<A, F>& p);
// y[i] = x[i] + a_shift * p[i], in double.
template <typename A, typename F>
void residual_shift_input(const A* x, const F* p, double a_shift, int64_t n, A* y);

}  // namespace moe::kernels::ref
