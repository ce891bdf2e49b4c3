// Causal attention (kernels/attention.h) computed exactly, in double, beside a bound on how far a
// computation with given rounding points may be from it: the cross-path rule's derived bound
// (tests/testing/cross_path.h) for the fused GPU kernels
// (kernels/cuda/flash_attention_kernels.cuh), whose arithmetic differs from the CPU reference's
// in more than the order of sums.
//
// The bound is a first-order running-error analysis of that arithmetic, entry by entry:
//   - every product and sum in f32 with relative error e32 per operation (2^-23: twice the unit
//     roundoff, so that tensor cores that truncate their f32 sums are covered too), the dot
//     products of length Dh, the row sums of length S;
//   - exp, log and the subtraction in their argument at a few e32;
//   - the probabilities (times the dropout scale) and the score gradients rounded to bf16 before
//     their products (ub = 2^-8, round to nearest), and every output rounded to bf16 once;
//   - D_i = sum_j P_ij m_ij dP_ij from P and dP, or, as the fused kernels form it, as dO_i . O'_i
//     from the output O' they stored (given: D's error is then |dO_i . O'_i - D_i|, in double,
//     plus the dot's f32 sum; O' itself is checked against its own bound).
// Each error is carried through the magnitudes it multiplies (|P| |V|, |dS| |K|, ...), so the
// bound is tight where values cancel and loose nowhere by more than these constants. A path that
// keeps P and dS in f32 (the CPU reference, the GEMM path) is inside it too.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/tensor.h"
#include "kernels/attention.h"

namespace moe::testing {

// Exact values (double, laid out as the kernels' outputs) and the bound on |computed - exact|
// for each entry.
struct AttentionWithBound {
  std::vector<double> out, out_bound;      // [B*S, D]
  std::vector<double> lse, lse_bound;      // [B, H, S]
  std::vector<double> d_qkv, d_qkv_bound;  // [B*S, 3D]
};

// qkv [B*S, 3D] and d_out [B*S, D]: host tensors of any floating dtype (bf16 inputs are exact in
// double). The scale is 1/sqrt(Dh) rounded to f32, as every path uses it. out_used: the output
// [B*S, D] (host) from which the path under test forms D_i (the fused kernels), or null for a
// path that forms it from P and dP.
AttentionWithBound exact_attention(const kernels::AttentionArgs& args, const TensorView& qkv,
                                   const TensorView& d_out, const TensorView* out_used = nullptr);

// Passes when every entry of `got` (a host tensor of the exact values' size) is within its
// bound of the exact value; the message names the count, the first and the worst entry.
::testing::AssertionResult within_bound(const std::string& what, const TensorView& got,
                                        const std::vector<double>& exact,
                                        const std::vector<double>& bound);

// The largest |got - exact| / bound over the entries (0 when every error is 0; infinite where a
// bound is 0 and the error is not, or for NaN).
double worst_error_over_bound(const TensorView& got, const std::vector<double>& exact,
                              const std::vector<double>& bound);

// The same over one part of d_qkv [B*S, 3D]: 0 dq, 1 dk, 2 dv (each has its own bound's terms,
// so a check that the bound is not loose looks at each).
double worst_part_error_over_bound(const TensorView& d_qkv, const std::vector<double>& exact,
                                   const std::vector<double>& bound, int part);

// The largest bound relative to the largest exact magnitude: a check that a bound is not so
// loose that it passes anything (a test asserts it is small).
double relative_bound(const std::vector<double>& exact, const std::vector<double>& bound);

}  // namespace moe::testing
