// How a test compares two computation paths of one computation: the rule every cross-path test
// follows, and says which kind of equality it checks (python/momoe_torch/cross_path.py is the
// Python twin: the same constants and stage counts).
//
//   Bit equality: only where the code path is the same by design (thread counts, resume, the
//   layouts the contract covers, the same kernel on the same inputs). memcmp, EXPECT_EQ.
//
//   Decisions, then a derived bound: everywhere else (momoe against PyTorch, GPU against CPU,
//   one BLAS kernel or GEMM shape against another, EP/DP layouts that sum in other orders).
//   1. The discrete decisions (top-k experts, capacity drops, AC clusters, SparseMixer sets,
//      sampling) are compared and counted first. A flip is legitimate only at a near-tie; a test
//      either pins the decisions (one path takes the other's) or reports the flips and bounds
//      their effect.
//   2. Values are bounded by the arithmetic: the precision's epsilon times the depth of the
//      computation (its rounding stages) times the magnitude the errors are relative to; never by
//      what one machine measured.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "types/model_config.h"

namespace moe::testing {

inline constexpr double kF32Eps = 0x1p-23;  // FLT_EPSILON
inline constexpr double kBf16Eps = 0x1p-7;  // bf16's epsilon (8 significant bits)
inline constexpr double kF64Eps = 0x1p-52;  // DBL_EPSILON
// One MoE layer (or a few) in f64 against the same computation in another order (EP layouts, a
// hand recurrence over a plain layer): f64 epsilon times a depth of 4096 (a layer's ~16 rounding
// stages, each a sum of up to 256 terms: D, F or the tokens), absolute, for values of order 1.
inline constexpr double kF64LayerTolerance = kF64Eps * 4096;  // 2^-40, about 9.1e-13

// Rounding stages of one forward pass (each a GEMM, a normalisation, a softmax or an elementwise
// update whose rounding reaches the next stage), for the longest variant of each sublayer.
struct ForwardStages {
  static constexpr int kEmbedding = 1;    // token + position
  static constexpr int kAttention = 7;    // qkv, scores, softmax, context, projection, add, LN
  static constexpr int kMoeToRouter = 4;  // (pre-LN) LN, robust shift, AC transform, router
  static constexpr int kMoeAfterRouter =
      9;                            // gates, fc1, act, fc2, combine, residual, LN_in, add, LN
  static constexpr int kDense = 5;  // fc1, act, fc2, add, LN
  static constexpr int kHead = 3;   // (pre-LN) final LN, head GEMM, log-softmax
};

struct ForwardDepth {
  std::vector<int> routers;  // the depth of each MoE layer's router logits
  int total = 0;             // the depth of the loss
};
ForwardDepth forward_depth(const ModelConfig& cfg);

// The bound on the difference of two roundings of a value computed through `depth` stages of
// relative error `eps`, relative to `scale` (at least 1: an absolute floor).
double rounding_tolerance(double eps, double depth, double scale = 1.0);
// The bound on the difference of a mean NLL (a log perplexity) from the exact value, for a path
// of `depth` stages: each stage rounds values LayerNorm keeps of order 1, the last (the
// log-softmax) rounds the NLL itself: eps x (depth + |nll|) (cross_path.py's
// perplexity_tolerance).
double loss_tolerance(double eps, double depth, double nll);
// The bound on a BF16 step's backward results (a gradient, the masters' step: L2 over every
// entry, relative) against another path's, for a model whose forward has `depth` stages. Not
// eps x depth: at these depths (60-125) that worst case passes 1 and bounds nothing. Each stage
// of the forward and of the backward (twice the depth) rounds to 8 bits independently, so the
// roundings add in quadrature (Higham and Mary's probabilistic bound, as
// torch_moe_reference.py's logic_bound): 8 standard deviations of u sqrt(2 depth), u = 2^-8.
// `bf16_paths` is how many of the two paths round to bf16: 1 against FP32 (whose roundings are
// 2^16 times smaller), 2 for two BF16 paths (GPU against CPU: independent roundings, whose
// difference has sqrt(2) times the deviation). A gradient or step of the wrong sign or scale
// is O(1). For the masters' step of AdamW it is the gradient entries' bound carried through:
// from a shared state a gradient error enters the moments scaled by (1 - beta), against moments
// at least that large where the gradients agree in sign. It is coarse: at the quick start's
// depth (64) two BF16 paths get 0.50, so a step twice too large fails and one 1.5 times too
// large passes; the optimizer's own kernels are compared bit for bit, and the gradient norm
// and the parameters' reach (trainer_test_util.h) are checked beside it.
double bf16_backward_bound(int depth, int bf16_paths);

// Decisions: rows of integer decisions (i32 or u8 host tensors of the same shape: [T, K] experts,
// [T, K] slots, [T, E] masks), compared row by row.
struct DecisionFlips {
  int64_t rows = 0;
  int64_t flipped = 0;            // rows that differ
  int64_t first = -1;             // the first such row
  std::string to_string() const;  // "2 of 64 rows differ (first: row 5)"
};
DecisionFlips count_flips(const TensorView& a, const TensorView& b);
// Passes when no row differs (the paths decided alike); the message names the first flip.
::testing::AssertionResult same_decisions(const std::string& what, const TensorView& a,
                                          const TensorView& b);

// Values: floating host tensors (f64, f32, bf16), elementwise. NaN on one side, or on both, and
// a shape mismatch never pass.
struct ValueDiff {
  bool shape_mismatch = false;
  int64_t nans = 0;    // elements where either side is NaN
  double max_abs = 0;  // over the elements where neither is NaN
  int64_t worst = -1;  // its index
  double a_worst = 0, b_worst = 0;
  std::string to_string() const;
};
ValueDiff value_diff(const TensorView& a, const TensorView& b);
// |a - b| <= tol everywhere (and no NaN, same shapes).
::testing::AssertionResult values_within(const std::string& what, const TensorView& a,
                                         const TensorView& b, double tol);
::testing::AssertionResult values_within(const std::string& what, const std::vector<double>& a,
                                         const std::vector<double>& b, double tol);

}  // namespace moe::testing
