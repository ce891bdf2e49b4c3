// Optimiser steps (kernels/optimizer.h) against hand-computed values: AdamW over one and two
// steps (bias correction, decoupled weight decay) in f64 and f32, SGD with and without momentum
// and weight decay, the global gradient norm (whole, and from the blocks of shards), and argument
// errors.
#include "kernels/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

using moe::testing::expect_invalid;

Context& ctx() { return testing::host_context(); }

// One AdamW step of a scalar, written out from the paper's algorithm (Loshchilov & Hutter):
// decay first, then the bias-corrected Adam update.
struct ScalarAdam {
  double p, m = 0, v = 0;
  void step(double g, double lr, double b1, double b2, double eps, double wd, int t) {
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const double m_hat = m / (1 - std::pow(b1, t)), v_hat = v / (1 - std::pow(b2, t));
    p = p - lr * wd * p - lr * m_hat / (std::sqrt(v_hat) + eps);
  }
};

TEST(AdamWTest, OneAndTwoStepsByHand) {
  Tensor p = Tensor::from_vector<double>({3}, {1.0, -2.0, 0.5});
  Tensor m = Tensor::zeros({3}, DType::kF64), v = Tensor::zeros({3}, DType::kF64);
  Tensor g1 = Tensor::from_vector<double>({3}, {0.5, -1.0, 0.0});
  Tensor g2 = Tensor::from_vector<double>({3}, {0.1, 2.0, -3.0});
  AdamWArgs a{0.1, 0.9, 0.99, 1e-8, 0.01, 1};
  ASSERT_TRUE(adamw_step(ctx(), a, p, g1, m, v).ok());
  // Step 1: m = 0.1 g, v = 0.01 g^2, m_hat = g, v_hat = g^2: p = p (1 - 0.001) - 0.1 g / (|g| +
  // eps).
  EXPECT_NEAR(p.data<double>()[0], 1.0 * 0.999 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(p.data<double>()[1], -2.0 * 0.999 + 0.1 * 1.0 / (1.0 + 1e-8), 1e-15);
  EXPECT_NEAR(p.data<double>()[2], 0.5 * 0.999, 1e-15);  // zero gradient: decay only
  EXPECT_NEAR(m.data<double>()[1], -0.1, 1e-16);
  EXPECT_NEAR(v.data<double>()[1], 0.01, 1e-16);
  const double p0 = p.data<double>()[0];
  a.step = 2;
  ASSERT_TRUE(adamw_step(ctx(), a, p, g2, m, v).ok());
  const double m0 = 0.9 * 0.05 + 0.1 * 0.1, v0 = 0.99 * 0.0025 + 0.01 * 0.01;
  const double want = p0 * 0.999 - 0.1 * (m0 / (1 - 0.81)) / (std::sqrt(v0 / (1 - 0.9801)) + 1e-8);
  EXPECT_NEAR(p.data<double>()[0], want, 1e-15);
  EXPECT_NEAR(m.data<double>()[0], m0, 1e-16);
  EXPECT_NEAR(v.data<double>()[0], v0, 1e-16);
}

TEST(AdamWTest, ThreeStepsAgainstScalarAlgorithmInF32AndF64) {
  const std::vector<std::vector<double>> grads = {{0.3, -0.2}, {-0.1, 0.4}, {0.25, 0.0}};
  for (DType dt : {DType::kF64, DType::kF32}) {
    Tensor p = Tensor::zeros({2}, dt), g = Tensor::zeros({2}, dt), m = Tensor::zeros({2}, dt),
           v = Tensor::zeros({2}, dt);
    std::vector<ScalarAdam> want = {{0.7}, {-1.3}};
    auto set = [&](const Tensor& t, int i, double x) {
      if (dt == DType::kF64)
        t.data<double>()[i] = x;
      else
        t.data<float>()[i] = static_cast<float>(x);
    };
    auto get = [&](const Tensor& t, int i) {
      return dt == DType::kF64 ? t.data<double>()[i] : double{t.data<float>()[i]};
    };
    set(p, 0, 0.7);
    set(p, 1, -1.3);
    for (int t = 1; t <= 3; ++t) {
      for (int i = 0; i < 2; ++i) {
        set(g, i, grads[t - 1][i]);
        want[i].step(get(g, i), 0.05, 0.8, 0.95, 1e-6, 0.1, t);
      }
      ASSERT_TRUE(adamw_step(ctx(), {0.05, 0.8, 0.95, 1e-6, 0.1, t}, p, g, m, v).ok());
      for (int i = 0; i < 2; ++i) {
        EXPECT_NEAR(get(p, i), want[i].p, dt == DType::kF64 ? 1e-15 : 1e-6) << "step " << t;
      }
    }
  }
}

TEST(SgdTest, PlainStepWithWeightDecay) {
  Tensor p = Tensor::from_vector<double>({2}, {1.0, -4.0});
  Tensor g = Tensor::from_vector<double>({2}, {2.0, 0.5});
  ASSERT_TRUE(sgd_step(ctx(), {0.1, 0.0, 0.5, true}, p, g, TensorView()).ok());
  // p -= lr (g + wd p).
  EXPECT_DOUBLE_EQ(p.data<double>()[0], 1.0 - 0.1 * (2.0 + 0.5 * 1.0));
  EXPECT_DOUBLE_EQ(p.data<double>()[1], -4.0 - 0.1 * (0.5 + 0.5 * -4.0));
}

TEST(SgdTest, MomentumOverTwoSteps) {
  Tensor p = Tensor::from_vector<double>({1}, {1.0});
  Tensor buf = Tensor::from_vector<double>({1}, {123.0});  // ignored on the first step
  Tensor g = Tensor::from_vector<double>({1}, {2.0});
  SgdArgs a{0.1, 0.5, 0.0, true};
  ASSERT_TRUE(sgd_step(ctx(), a, p, g, buf).ok());
  EXPECT_DOUBLE_EQ(buf.data<double>()[0], 2.0);
  EXPECT_DOUBLE_EQ(p.data<double>()[0], 1.0 - 0.1 * 2.0);
  a.first_step = false;
  a.weight_decay = 0.25;
  ASSERT_TRUE(sgd_step(ctx(), a, p, g, buf).ok());
  const double d = 2.0 + 0.25 * 0.8;  // g + wd p
  EXPECT_DOUBLE_EQ(buf.data<double>()[0], 0.5 * 2.0 + d);
  EXPECT_DOUBLE_EQ(p.data<double>()[0], 0.8 - 0.1 * (0.5 * 2.0 + d));
}

TEST(GradNormTest, SumOfSquaresOverMixedViewsAccumulates) {
  Tensor a = Tensor::from_vector<double>({2}, {3.0, 0.0});
  Tensor b = Tensor::from_vector<float>({2, 1}, {4.0f, 12.0f});
  Tensor out = Tensor::zeros({1}, DType::kF64);
  ASSERT_TRUE(sum_of_squares(ctx(), {a, b}, out).ok());
  EXPECT_DOUBLE_EQ(out.data<double>()[0], 9.0 + 16.0 + 144.0);
  ASSERT_TRUE(sum_of_squares(ctx(), {}, out).ok());
  EXPECT_DOUBLE_EQ(out.data<double>()[0], 169.0);  // accumulated: unchanged by nothing
  expect_invalid(sum_of_squares(ctx(), {a, Tensor::zeros({2}, DType::kI32)}, out), "views");
  expect_invalid(sum_of_squares(ctx(), {a}, Tensor::zeros({1}, DType::kF32)), "out");
}

// The distributed optimizer's norm (kernels/optimizer.h): the blocks of consecutive shards,
// each a whole number of blocks but the last, added in order give sum_of_squares of the whole
// view bit for bit (the same operations on the same operands), for f32, bf16 and f64, at sizes
// that end inside a block and inside a group of four lanes. Values with many significant bits
// (an order-dependent sum), a block partial checked by hand, and the arguments.
TEST(GradNormTest, BlocksOfShardsAddUpToTheWholeSumBitForBit) {
  constexpr int64_t B = kSquaresBlock;
  EXPECT_TRUE(sum_of_squares_by_blocks(ctx()));
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF64}) {
    for (const int64_t n : {int64_t{1}, int64_t{4} * B + 7, int64_t{3} * B + 2, int64_t{3} * B}) {
      Tensor x = Tensor::empty({n}, dtype);
      testing::fill_uniform(x, 7, -3.0, 3.0);
      Tensor whole = Tensor::zeros({1}, DType::kF64);
      ASSERT_TRUE(sum_of_squares(ctx(), {x}, whole).ok());
      for (const int64_t chunk : {B, 2 * B, 4 * B}) {  // shards of chunk elements, the last short
        const int64_t shards = (n + chunk - 1) / chunk, per_shard = chunk / B;
        Tensor blocks = Tensor::zeros({shards * per_shard}, DType::kF64);
        for (int64_t r = 0; r < shards; ++r) {
          const int64_t lo = r * chunk, hi = std::min(n, lo + chunk);
          const int64_t used = (hi - lo + B - 1) / B;
          ASSERT_TRUE(sum_of_squares_blocks(ctx(), x.view().rows(lo, hi),
                                            blocks.view().rows(r * per_shard, r * per_shard + used))
                          .ok());
        }
        Tensor sharded = Tensor::zeros({1}, DType::kF64);
        ASSERT_TRUE(sum_in_order(ctx(), blocks, sharded).ok());
        EXPECT_EQ(sharded.data<double>()[0], whole.data<double>()[0])
            << dtype_name(dtype) << " n " << n << " chunk " << chunk;
      }
    }
  }
  // One block of five: lanes (9 + 4) and 16, 0, 0, then (13 + 16) + (0 + 0).
  Tensor five = Tensor::from_vector<double>({5}, {3.0, 4.0, 0.0, 0.0, 2.0});
  Tensor one = Tensor::zeros({1}, DType::kF64);
  ASSERT_TRUE(sum_of_squares_blocks(ctx(), five, one).ok());
  EXPECT_EQ(one.data<double>()[0], 29.0);
  Tensor out = Tensor::from_vector<double>({1}, {1.0});
  ASSERT_TRUE(sum_in_order(ctx(), Tensor::from_vector<double>({3}, {2.0, 3.0, 4.0}), out).ok());
  EXPECT_EQ(out.data<double>()[0], 10.0);  // accumulated
  expect_invalid(sum_of_squares_blocks(ctx(), five, Tensor::zeros({2}, DType::kF64)), "out");
  expect_invalid(sum_of_squares_blocks(ctx(), Tensor::zeros({2}, DType::kI32), one), "x");
  expect_invalid(sum_in_order(ctx(), Tensor::zeros({2}, DType::kF32), one), "x");
}

// grad_scale (clipping folded into the update) equals scaling the gradient first.
TEST(AdamWTest, GradScaleEqualsScaledGradient) {
  Tensor p1 = Tensor::from_vector<double>({3}, {0.5, -1.0, 2.0}), p2 = Tensor::copy_of(p1);
  Tensor g = Tensor::from_vector<double>({3}, {3.0, -4.0, 12.0});
  Tensor g_scaled = Tensor::from_vector<double>({3}, {3.0 / 13, -4.0 / 13, 12.0 / 13});
  Tensor m1 = Tensor::zeros({3}, DType::kF64), v1 = Tensor::zeros({3}, DType::kF64);
  Tensor m2 = Tensor::zeros({3}, DType::kF64), v2 = Tensor::zeros({3}, DType::kF64);
  AdamWArgs a{0.01, 0.9, 0.999, 1e-8, 0.1, 1, 1.0 / 13};
  ASSERT_TRUE(adamw_step(ctx(), a, p1, g, m1, v1).ok());
  a.grad_scale = 1.0;
  ASSERT_TRUE(adamw_step(ctx(), a, p2, g_scaled, m2, v2).ok());
  EXPECT_LT(testing::max_abs_diff(p1, p2), 1e-15);
  EXPECT_LT(testing::max_abs_diff(m1, m2), 1e-15);
  SgdArgs s{0.1, 0.0, 0.0, true, 0.5};
  Tensor q = Tensor::from_vector<double>({1}, {1.0});
  ASSERT_TRUE(sgd_step(ctx(), s, q, Tensor::from_vector<double>({1}, {2.0}), TensorView()).ok());
  EXPECT_DOUBLE_EQ(q.data<double>()[0], 1.0 - 0.1 * 1.0);
}

TEST(OptimizerTest, BadArgumentsAreInvalidArgument) {
  Tensor p = Tensor::zeros({3}, DType::kF32), g = Tensor::zeros({3}, DType::kF32),
         m = Tensor::zeros({3}, DType::kF32), v = Tensor::zeros({3}, DType::kF32);
  AdamWArgs a;
  ASSERT_TRUE(adamw_step(ctx(), a, p, g, m, v).ok());
  expect_invalid(adamw_step(ctx(), a, p, Tensor::zeros({4}, DType::kF32), m, v), "grad");
  expect_invalid(adamw_step(ctx(), a, p, g, Tensor::zeros({3}, DType::kF64), v), "m");
  expect_invalid(adamw_step(ctx(), a, p, g, m, Tensor::zeros({1, 3}, DType::kF32)), "v");
  expect_invalid(adamw_step(ctx(), a, Tensor::zeros({3}, DType::kI32), g, m, v), "param");
  a.step = 0;
  expect_invalid(adamw_step(ctx(), a, p, g, m, v), "step");
  a.step = 1;
  a.beta2 = 1.0;
  expect_invalid(adamw_step(ctx(), a, p, g, m, v), "beta2");
  a.beta2 = 0.999;
  a.eps = 0;
  expect_invalid(adamw_step(ctx(), a, p, g, m, v), "eps");
  expect_invalid(sgd_step(ctx(), {0.1, 0.9, 0.0, true}, p, g, TensorView()), "buf");
  expect_invalid(sgd_step(ctx(), {0.1, -0.5, 0.0, true}, p, g, m), "momentum");
  expect_invalid(sgd_step(ctx(), {0.1, 0.0, 0.0, true}, p, Tensor::zeros({3}, DType::kF64), m),
                 "grad");
}

}  // namespace
}  // namespace moe::kernels
