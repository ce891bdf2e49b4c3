// LayerNorm and RMSNorm (kernels/layernorm.h): forward against a direct computation and hand
// values, saved statistics, aliasing, the backward against central finite differences in f64 (dx
// overwritten, parameter gradients accumulated), bf16 activations, and argument errors.
#include "kernels/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

using moe::testing::check_gradients;
using moe::testing::dot;
using moe::testing::expect_invalid;
using moe::testing::fill_uniform;

Context& ctx() { return testing::host_context(); }

TEST(LayerNormTest, HandValues) {
  Tensor x = Tensor::from_vector<double>({2, 4}, {1, 2, 3, 4, -2, 0, 2, 4});
  Tensor g = Tensor::from_vector<double>({4}, {1, 2, 1, 1});
  Tensor b = Tensor::from_vector<double>({4}, {0, 0, 0, 10});
  Tensor y = Tensor::empty({2, 4}, DType::kF64), mean = Tensor::empty({2}, DType::kF64),
         rstd = Tensor::empty({2}, DType::kF64);
  ASSERT_TRUE(layernorm_forward(ctx(), x, g, b, 0.0, y, mean, rstd).ok());
  const double s0 = 1 / std::sqrt(1.25);  // row 0: mean 2.5, biased variance 1.25
  const double s1 = 1 / std::sqrt(5.0);   // row 1: mean 1, variance (9 + 1 + 1 + 9) / 4
  EXPECT_EQ(to_vector<double>(mean), (std::vector<double>{2.5, 1.0}));
  EXPECT_NEAR(rstd.data<double>()[0], s0, 1e-15);
  EXPECT_NEAR(rstd.data<double>()[1], s1, 1e-15);
  const std::vector<double> want = {-1.5 * s0, 2 * -0.5 * s0, 0.5 * s0, 1.5 * s0 + 10,
                                    -3 * s1,   2 * -1 * s1,   1 * s1,   3 * s1 + 10};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y.data<double>()[i], want[i], 1e-14) << i;
}

TEST(LayerNormTest, ForwardMatchesTwoPassForAwkwardShapesAndAliases) {
  struct Case {
    int64_t n, d;
    double eps;
  };
  for (const Case c : {Case{1, 1, 1e-5}, Case{3, 5, 1e-5}, Case{4, 7, 0.1}, Case{2, 33, 1e-6}}) {
    SCOPED_TRACE(str_cat("N ", c.n, " D ", c.d));
    for (DType dt : {DType::kF64, DType::kF32}) {
      Tensor x = Tensor::empty({c.n, c.d}, dt), g = Tensor::empty({c.d}, dt),
             b = Tensor::empty({c.d}, dt);
      fill_uniform(x, 1, -3, 3);
      fill_uniform(g, 2, 0.5, 1.5);
      fill_uniform(b, 3);
      Tensor y = Tensor::empty({c.n, c.d}, dt), mean = Tensor::empty({c.n}, dt),
             rstd = Tensor::empty({c.n}, dt);
      Tensor x_copy = Tensor::copy_of(x);
      ASSERT_TRUE(layernorm_forward(ctx(), x, g, b, c.eps, y, mean, rstd).ok());
      const double tol = dt == DType::kF64 ? 1e-13 : 2e-6;
      auto at = [](const Tensor& t, int64_t i) {
        return t.dtype() == DType::kF64 ? t.data<double>()[i] : double{t.data<float>()[i]};
      };
      for (int64_t r = 0; r < c.n; ++r) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < c.d; ++j) m += at(x, r * c.d + j) / c.d;
        for (int64_t j = 0; j < c.d; ++j)
          v += (at(x, r * c.d + j) - m) * (at(x, r * c.d + j) - m) / c.d;
        EXPECT_NEAR(at(mean, r), m, tol);
        EXPECT_NEAR(at(rstd, r), 1 / std::sqrt(v + c.eps), tol * (1 + 1 / std::sqrt(v + c.eps)));
        for (int64_t j = 0; j < c.d; ++j) {
          const double want = (at(x, r * c.d + j) - m) / std::sqrt(v + c.eps) * at(g, j) + at(b, j);
          EXPECT_NEAR(at(y, r * c.d + j), want, tol * 10);
        }
      }
      // y may alias x: the same bits as the separate output.
      ASSERT_TRUE(layernorm_forward(ctx(), x_copy, g, b, c.eps, x_copy, mean, rstd).ok());
      EXPECT_TRUE(moe::testing::bitwise_equal(x_copy, y));
    }
  }
}

TEST(LayerNormTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  struct Case {
    int64_t n, d;
  };
  for (const Case c : {Case{1, 1}, Case{1, 3}, Case{3, 5}, Case{4, 7}}) {
    SCOPED_TRACE(str_cat("N ", c.n, " D ", c.d));
    Tensor x = Tensor::empty({c.n, c.d}, DType::kF64), g = Tensor::empty({c.d}, DType::kF64),
           b = Tensor::empty({c.d}, DType::kF64);
    fill_uniform(x, 11, -2, 2);
    fill_uniform(g, 12, 0.5, 1.5);
    fill_uniform(b, 13);
    Tensor y = Tensor::empty({c.n, c.d}, DType::kF64), mean = Tensor::empty({c.n}, DType::kF64),
           rstd = Tensor::empty({c.n}, DType::kF64);
    Tensor w = Tensor::empty({c.n, c.d}, DType::kF64);
    fill_uniform(w, 14);
    auto loss = [&]() {
      EXPECT_TRUE(layernorm_forward(ctx(), x, g, b, 1e-5, y, mean, rstd).ok());
      return dot(y, w);
    };
    loss();
    Tensor dx = Tensor::empty({c.n, c.d}, DType::kF64);
    fill_uniform(dx, 15);  // overwritten
    Tensor dg = Tensor::zeros({c.d}, DType::kF64), db = Tensor::zeros({c.d}, DType::kF64);
    ASSERT_TRUE(layernorm_backward(ctx(), w, x, g, mean, rstd, {dx, dg, db}).ok());
    for (const auto& f : check_gradients(loss, {{"x", x, dx}, {"gamma", g, dg}, {"beta", b, db}},
                                         {1e-6, 1e-8, 1e-6})) {
      ADD_FAILURE() << f;
    }
    // A second backward adds the same parameter gradients again; dx (aliasing dy here) is
    // overwritten with the same values.
    loss();
    Tensor dg1 = Tensor::copy_of(dg), db1 = Tensor::copy_of(db), dx1 = Tensor::copy_of(dx);
    Tensor dy = Tensor::copy_of(w);
    ASSERT_TRUE(layernorm_backward(ctx(), dy, x, g, mean, rstd, {dy, dg, db}).ok());
    EXPECT_LT(moe::testing::max_abs_diff(dy, dx1), 1e-15);
    for (int64_t j = 0; j < c.d; ++j) {
      EXPECT_NEAR(dg.data<double>()[j], 2 * dg1.data<double>()[j], 1e-14);
      EXPECT_NEAR(db.data<double>()[j], 2 * db1.data<double>()[j], 1e-14);
    }
  }
}

// bf16 activations with fp32 parameters and statistics: the statistics are the f32 ones of the
// same (bf16-exact) input, and the output is the f32 output rounded once.
TEST(LayerNormTest, Bf16ActivationsWithF32Statistics) {
  const int64_t n = 3, d = 9;
  Tensor xb = Tensor::empty({n, d}, DType::kBF16), xf = Tensor::empty({n, d}, DType::kF32);
  fill_uniform(xb, 21, -3, 3);
  for (int64_t i = 0; i < n * d; ++i) xf.data<float>()[i] = static_cast<float>(xb.data<bf16>()[i]);
  Tensor g = Tensor::empty({d}, DType::kF32), b = Tensor::empty({d}, DType::kF32);
  fill_uniform(g, 22, 0.5, 1.5);
  fill_uniform(b, 23);
  Tensor yb = Tensor::empty({n, d}, DType::kBF16), yf = Tensor::empty({n, d}, DType::kF32);
  Tensor mb = Tensor::empty({n}, DType::kF32), rb = Tensor::empty({n}, DType::kF32);
  Tensor mf = Tensor::empty({n}, DType::kF32), rf = Tensor::empty({n}, DType::kF32);
  ASSERT_TRUE(layernorm_forward(ctx(), xb, g, b, 1e-5, yb, mb, rb).ok());
  ASSERT_TRUE(layernorm_forward(ctx(), xf, g, b, 1e-5, yf, mf, rf).ok());
  EXPECT_TRUE(moe::testing::bitwise_equal(mb, mf));
  EXPECT_TRUE(moe::testing::bitwise_equal(rb, rf));
  for (int64_t i = 0; i < n * d; ++i) {
    EXPECT_EQ(static_cast<float>(yb.data<bf16>()[i]),
              static_cast<float>(bf16(yf.data<float>()[i])));
  }
  // The backward: dx in bf16, parameter gradients in f32; bf16 statistics dtypes are refused.
  Tensor dx = Tensor::empty({n, d}, DType::kBF16);
  Tensor dg = Tensor::zeros({d}, DType::kF32), db = Tensor::zeros({d}, DType::kF32);
  ASSERT_TRUE(layernorm_backward(ctx(), yb, xb, g, mb, rb, {dx, dg, db}).ok());
  expect_invalid(layernorm_forward(ctx(), xb, g, b, 1e-5, yb, Tensor::zeros({n}, DType::kBF16), rb),
                 "mean");
}

TEST(LayerNormTest, BadArgumentsAreInvalidArgument) {
  Tensor x = Tensor::zeros({2, 3}, DType::kF32), g = Tensor::zeros({3}, DType::kF32),
         b = Tensor::zeros({3}, DType::kF32), y = Tensor::zeros({2, 3}, DType::kF32),
         mean = Tensor::zeros({2}, DType::kF32), rstd = Tensor::zeros({2}, DType::kF32);
  ASSERT_TRUE(layernorm_forward(ctx(), x, g, b, 1e-5, y, mean, rstd).ok());
  expect_invalid(layernorm_forward(ctx(), x.view().reshape({6}), g, b, 1e-5, y, mean, rstd), "x");
  expect_invalid(
      layernorm_forward(ctx(), Tensor::zeros({2, 3}, DType::kI32), g, b, 1e-5, y, mean, rstd), "x");
  expect_invalid(
      layernorm_forward(ctx(), x, Tensor::zeros({4}, DType::kF32), b, 1e-5, y, mean, rstd),
      "gamma");
  expect_invalid(
      layernorm_forward(ctx(), x, g, Tensor::zeros({3}, DType::kF64), 1e-5, y, mean, rstd), "beta");
  expect_invalid(
      layernorm_forward(ctx(), x, g, b, 1e-5, Tensor::zeros({3, 2}, DType::kF32), mean, rstd), "y");
  expect_invalid(layernorm_forward(ctx(), x, g, b, 1e-5, y, Tensor::zeros({3}, DType::kF32), rstd),
                 "mean");
  expect_invalid(layernorm_forward(ctx(), x, g, b, 1e-5, y, mean, Tensor::zeros({2}, DType::kF64)),
                 "rstd");
  expect_invalid(layernorm_forward(ctx(), x, g, b, -1.0, y, mean, rstd), "eps");
  Tensor dx = Tensor::zeros({2, 3}, DType::kF32);
  expect_invalid(
      layernorm_backward(ctx(), Tensor::zeros({2, 2}, DType::kF32), x, g, mean, rstd, {dx, g, b}),
      "dy");
  expect_invalid(
      layernorm_backward(ctx(), y, x, g, mean, rstd, {Tensor::zeros({2, 2}, DType::kF32), g, b}),
      "dx");
  expect_invalid(
      layernorm_backward(ctx(), y, x, g, mean, rstd, {dx, Tensor::zeros({2}, DType::kF32), b}),
      "dgamma");
  expect_invalid(
      layernorm_backward(ctx(), y, x, g, mean, rstd, {dx, g, Tensor::zeros({3}, DType::kF64)}),
      "dbeta");
}

// RMSNorm: y = x * rstd * gamma, rstd = 1 / sqrt(mean_j x^2 + eps). Rows whose mean square plus
// eps is a power of 4 give exact rstd; an all-zero row normalises to zero through eps alone.
TEST(RmsNormTest, HandValues) {
  Tensor x = Tensor::from_vector<double>({3, 4}, {1, 2, 1, 3, 0, 0, 0, 0, 1, 2, 3, 4});
  Tensor g = Tensor::from_vector<double>({4}, {1, 2, 1, -1});
  Tensor y = Tensor::empty({3, 4}, DType::kF64), rstd = Tensor::empty({3}, DType::kF64);
  ASSERT_TRUE(rmsnorm_forward(ctx(), x, g, 0.25, y, rstd).ok());
  // Row 0: mean square 15 / 4, plus eps: 4, rstd 1/2. Row 1: eps alone, rstd 2.
  // Row 2: mean square 30 / 4 = 7.5, plus eps 7.75.
  const double s2 = 1 / std::sqrt(7.75);
  EXPECT_EQ(rstd.data<double>()[0], 0.5);
  EXPECT_EQ(rstd.data<double>()[1], 2.0);
  EXPECT_NEAR(rstd.data<double>()[2], s2, 1e-15);
  const std::vector<double> want = {0.5, 2, 0.5, -1.5, 0, 0, 0, 0, s2, 4 * s2, 3 * s2, -4 * s2};
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(y.data<double>()[i], want[i], 1e-15) << i;
}

TEST(RmsNormTest, ForwardMatchesDirectComputationForAwkwardShapesAndAliases) {
  struct Case {
    int64_t n, d;
    double eps;
  };
  for (const Case c : {Case{1, 1, 1e-5}, Case{3, 5, 1e-5}, Case{4, 7, 0.1}, Case{2, 33, 1e-6},
                       Case{5, 130, 1e-5}}) {
    SCOPED_TRACE(str_cat("N ", c.n, " D ", c.d));
    for (DType dt : {DType::kF64, DType::kF32}) {
      Tensor x = Tensor::empty({c.n, c.d}, dt), g = Tensor::empty({c.d}, dt);
      fill_uniform(x, 1, -3, 3);
      fill_uniform(g, 2, -1.5, 1.5);
      Tensor y = Tensor::empty({c.n, c.d}, dt), rstd = Tensor::empty({c.n}, dt);
      Tensor x_copy = Tensor::copy_of(x);
      ASSERT_TRUE(rmsnorm_forward(ctx(), x, g, c.eps, y, rstd).ok());
      // Both sides compute in double from the same inputs: f32 differs by the one rounding of
      // each output (half an ulp, 2^-24 relative), f64 by a few ulps of summation order.
      const double tol = dt == DType::kF64 ? 1e-14 : 0x1p-24 + 1e-14;
      auto at = [](const Tensor& t, int64_t i) {
        return t.dtype() == DType::kF64 ? t.data<double>()[i] : double{t.data<float>()[i]};
      };
      for (int64_t r = 0; r < c.n; ++r) {
        double ms = 0;
        for (int64_t j = 0; j < c.d; ++j) ms += at(x, r * c.d + j) * at(x, r * c.d + j);
        const double rs = 1 / std::sqrt(ms / static_cast<double>(c.d) + c.eps);
        EXPECT_NEAR(at(rstd, r), rs, tol * rs);
        for (int64_t j = 0; j < c.d; ++j) {
          const double want = at(x, r * c.d + j) * rs * at(g, j);
          EXPECT_NEAR(at(y, r * c.d + j), want, tol * std::fabs(want));
        }
      }
      // y may alias x: the same bits as the separate output.
      ASSERT_TRUE(rmsnorm_forward(ctx(), x_copy, g, c.eps, x_copy, rstd).ok());
      EXPECT_TRUE(moe::testing::bitwise_equal(x_copy, y));
    }
  }
}

TEST(RmsNormTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  struct Case {
    int64_t n, d;
    double eps;
  };
  for (const Case c : {Case{1, 1, 0.1}, Case{1, 3, 1e-5}, Case{3, 5, 1e-5}, Case{4, 7, 0.1}}) {
    SCOPED_TRACE(str_cat("N ", c.n, " D ", c.d, " eps ", c.eps));
    Tensor x = Tensor::empty({c.n, c.d}, DType::kF64), g = Tensor::empty({c.d}, DType::kF64);
    fill_uniform(x, 11, -2, 2);
    fill_uniform(g, 12, 0.5, 1.5);
    Tensor y = Tensor::empty({c.n, c.d}, DType::kF64), rstd = Tensor::empty({c.n}, DType::kF64);
    Tensor w = Tensor::empty({c.n, c.d}, DType::kF64);
    fill_uniform(w, 14);
    auto loss = [&]() {
      EXPECT_TRUE(rmsnorm_forward(ctx(), x, g, c.eps, y, rstd).ok());
      return dot(y, w);
    };
    loss();
    Tensor dx = Tensor::empty({c.n, c.d}, DType::kF64);
    fill_uniform(dx, 15);  // overwritten
    Tensor dg = Tensor::zeros({c.d}, DType::kF64);
    ASSERT_TRUE(rmsnorm_backward(ctx(), w, x, g, rstd, {dx, dg}).ok());
    for (const auto& f :
         check_gradients(loss, {{"x", x, dx}, {"gamma", g, dg}}, {1e-6, 1e-8, 1e-6})) {
      ADD_FAILURE() << f;
    }
    // A second backward adds the same gamma gradient again; dx (aliasing dy here) is overwritten
    // with the same values.
    loss();
    Tensor dg1 = Tensor::copy_of(dg), dx1 = Tensor::copy_of(dx);
    Tensor dy = Tensor::copy_of(w);
    ASSERT_TRUE(rmsnorm_backward(ctx(), dy, x, g, rstd, {dy, dg}).ok());
    EXPECT_TRUE(moe::testing::bitwise_equal(dy, dx1));
    for (int64_t j = 0; j < c.d; ++j) {
      EXPECT_NEAR(dg.data<double>()[j], 2 * dg1.data<double>()[j], 1e-14);
    }
  }
}

// bf16 activations with fp32 gamma and rstd: rstd is the f32 one of the same (bf16-exact) input,
// and the output is the f32 output's double value rounded once to bf16.
TEST(RmsNormTest, Bf16ActivationsWithF32Statistics) {
  const int64_t n = 3, d = 9;
  Tensor xb = Tensor::empty({n, d}, DType::kBF16), xf = Tensor::empty({n, d}, DType::kF32);
  fill_uniform(xb, 21, -3, 3);
  for (int64_t i = 0; i < n * d; ++i) xf.data<float>()[i] = static_cast<float>(xb.data<bf16>()[i]);
  Tensor g = Tensor::empty({d}, DType::kF32);
  fill_uniform(g, 22, 0.5, 1.5);
  Tensor yb = Tensor::empty({n, d}, DType::kBF16), yf = Tensor::empty({n, d}, DType::kF32);
  Tensor rb = Tensor::empty({n}, DType::kF32), rf = Tensor::empty({n}, DType::kF32);
  ASSERT_TRUE(rmsnorm_forward(ctx(), xb, g, 1e-5, yb, rb).ok());
  ASSERT_TRUE(rmsnorm_forward(ctx(), xf, g, 1e-5, yf, rf).ok());
  EXPECT_TRUE(moe::testing::bitwise_equal(rb, rf));
  for (int64_t i = 0; i < n * d; ++i) {
    EXPECT_EQ(static_cast<float>(yb.data<bf16>()[i]),
              static_cast<float>(bf16(yf.data<float>()[i])));
  }
  // The backward: dx in bf16, dgamma in f32; a bf16 rstd is refused.
  Tensor dx = Tensor::empty({n, d}, DType::kBF16), dg = Tensor::zeros({d}, DType::kF32);
  ASSERT_TRUE(rmsnorm_backward(ctx(), yb, xb, g, rb, {dx, dg}).ok());
  expect_invalid(rmsnorm_forward(ctx(), xb, g, 1e-5, yb, Tensor::zeros({n}, DType::kBF16)), "rstd");
}

TEST(RmsNormTest, BadArgumentsAreInvalidArgument) {
  Tensor x = Tensor::zeros({2, 3}, DType::kF32), g = Tensor::zeros({3}, DType::kF32),
         y = Tensor::zeros({2, 3}, DType::kF32), rstd = Tensor::zeros({2}, DType::kF32);
  ASSERT_TRUE(rmsnorm_forward(ctx(), x, g, 1e-5, y, rstd).ok());
  expect_invalid(rmsnorm_forward(ctx(), x.view().reshape({6}), g, 1e-5, y, rstd), "x");
  expect_invalid(rmsnorm_forward(ctx(), Tensor::zeros({2, 3}, DType::kI32), g, 1e-5, y, rstd), "x");
  expect_invalid(rmsnorm_forward(ctx(), x, Tensor::zeros({4}, DType::kF32), 1e-5, y, rstd),
                 "gamma");
  expect_invalid(rmsnorm_forward(ctx(), x, Tensor::zeros({3}, DType::kF64), 1e-5, y, rstd),
                 "gamma");
  expect_invalid(rmsnorm_forward(ctx(), x, g, 1e-5, Tensor::zeros({3, 2}, DType::kF32), rstd), "y");
  expect_invalid(rmsnorm_forward(ctx(), x, g, 1e-5, y, Tensor::zeros({3}, DType::kF32)), "rstd");
  expect_invalid(rmsnorm_forward(ctx(), x, g, 1e-5, y, Tensor::zeros({2}, DType::kF64)), "rstd");
  expect_invalid(rmsnorm_forward(ctx(), x, g, -1.0, y, rstd), "eps");
  Tensor dx = Tensor::zeros({2, 3}, DType::kF32);
  expect_invalid(rmsnorm_backward(ctx(), Tensor::zeros({2, 2}, DType::kF32), x, g, rstd, {dx, g}),
                 "dy");
  expect_invalid(rmsnorm_backward(ctx(), y, x, g, rstd, {Tensor::zeros({2, 2}, DType::kF32), g}),
                 "dx");
  expect_invalid(rmsnorm_backward(ctx(), y, x, g, rstd, {dx, Tensor::zeros({2}, DType::kF32)}),
                 "dgamma");
  expect_invalid(rmsnorm_backward(ctx(), y, x, g, Tensor::zeros({1}, DType::kF32), {dx, g}),
                 "rstd");
}

}  // namespace
}  // namespace moe::kernels
