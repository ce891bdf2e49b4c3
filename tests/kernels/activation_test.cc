// Activations (elementwise and SwiGLU), the sigmoid row gate, biases and dropout
// (kernels/activation.h) on the CPU: hand values, every backward against finite differences in f64,
// large inputs, bf16 rounding, masks keyed by row, and argument errors.
#include "kernels/activation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "kernels/elementwise.h"
#include "tests/testing/gradient_check.h"

namespace moe::kernels {
namespace {

Context& ctx() { return testing::host_context(); }

class ActivationTest : public ::testing::TestWithParam<Activation> {};

// The derivative against central differences in double precision.
TEST_P(ActivationTest, BackwardMatchesFiniteDifferences) {
  const Activation act = GetParam();
  std::vector<double> xs = {-3.0, -1.3, -0.2, 0.05, 0.7, 2.4};
  Tensor x = Tensor::from_vector<double>({6}, xs);
  Tensor dy = Tensor::from_vector<double>({6}, {1, 1, 1, 1, 1, 1});
  Tensor dx = Tensor::zeros({6}, DType::kF64);
  ASSERT_TRUE(activation_backward(ctx(), act, x, dy, dx).ok());
  const double h = 1e-6;
  for (int i = 0; i < 6; ++i) {
    Tensor xp = Tensor::from_vector<double>({1}, {xs[i] + h});
    Tensor xm = Tensor::from_vector<double>({1}, {xs[i] - h});
    Tensor yp = Tensor::zeros({1}, DType::kF64), ym = Tensor::zeros({1}, DType::kF64);
    ASSERT_TRUE(activation_forward(ctx(), act, xp, yp).ok());
    ASSERT_TRUE(activation_forward(ctx(), act, xm, ym).ok());
    const double fd = (yp.data<double>()[0] - ym.data<double>()[0]) / (2 * h);
    EXPECT_NEAR(dx.data<double>()[i], fd, 1e-7) << activation_name(act) << " at " << xs[i];
  }
}

INSTANTIATE_TEST_SUITE_P(All, ActivationTest,
                         ::testing::Values(Activation::kRelu, Activation::kGelu,
                                           Activation::kGeluTanh, Activation::kSilu));

TEST(ActivationValues, KnownPoints) {
  Tensor x = Tensor::from_vector<double>({3}, {-1.0, 0.0, 1.0});
  Tensor y = Tensor::zeros({3}, DType::kF64);
  ASSERT_TRUE(activation_forward(ctx(), Activation::kGelu, x, y).ok());
  EXPECT_NEAR(y.data<double>()[2], 0.8413447460685429, 1e-12);  // Phi(1)
  EXPECT_NEAR(y.data<double>()[0], -0.15865525393145707, 1e-12);
  ASSERT_TRUE(activation_forward(ctx(), Activation::kRelu, x, y).ok());
  EXPECT_EQ(to_vector<double>(y), (std::vector<double>{0.0, 0.0, 1.0}));
  // silu(x) = x / (1 + e^-x): silu(1) = 0.7310..., silu(-1) = -0.2689...
  ASSERT_TRUE(activation_forward(ctx(), Activation::kSilu, x, y).ok());
  EXPECT_NEAR(y.data<double>()[0], -0.2689414213699951, 1e-15);
  EXPECT_EQ(y.data<double>()[1], 0.0);
  EXPECT_NEAR(y.data<double>()[2], 0.7310585786300049, 1e-15);
}

// SwiGLU on rows [g0 g1 | u0 u1] (F = 2), by hand: y = silu(g) u, d_gate = dy u silu'(g),
// d_up = dy silu(g), with silu'(x) = s (1 + x (1 - s)), s = 1 / (1 + e^-x): silu'(0) = 0.5,
// silu'(1) = 0.9276..., silu'(-1) = 0.0723..., silu'(2) = 1.0907...; silu(2) = 1.7615...
TEST(SwigluTest, HandValuesOfForwardAndBackward) {
  Tensor x = Tensor::from_vector<double>({2, 4}, {0, 1, 5, 2, -1, 2, 3, -0.5});
  Tensor y = Tensor::zeros({2, 2}, DType::kF64);
  ASSERT_TRUE(swiglu_forward(ctx(), x, y).ok());
  const double silu1 = 0.7310585786300049, silu_m1 = -0.2689414213699951;
  const double silu2 = 1.7615941559557646;
  const std::vector<double> want_y = {0.0, 2 * silu1, 3 * silu_m1, -0.5 * silu2};
  Tensor dy = Tensor::from_vector<double>({2, 2}, {1, 2, -1, 0.5});
  Tensor dx = Tensor::zeros({2, 4}, DType::kF64);
  ASSERT_TRUE(swiglu_backward(ctx(), x, dy, dx).ok());
  const double g0 = 0.5, g1 = 0.9276705118714869, gm1 = 0.07232948812851325,
               g2 = 1.0907842487848955;
  const std::vector<double> want_dx = {1 * 5 * g0,   2 * 2 * g1,      0.0,      2 * silu1,
                                       -1 * 3 * gm1, 0.5 * -0.5 * g2, -silu_m1, 0.5 * silu2};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(y.data<double>()[i], want_y[i], 1e-15 * (1 + std::fabs(want_y[i]))) << i;
  }
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(dx.data<double>()[i], want_dx[i], 1e-15 * (1 + std::fabs(want_dx[i]))) << i;
  }
}

// Far out the sigmoid is exactly 0 or 1 in double (e^-40 < 2^-53): silu(g) = g for g >= 40 and
// -0 for g <= -800, silu' = 1 and 0, with no overflow on the way (e^800 is inf in double, and
// e^100 in float), for every act dtype.
TEST(SwigluTest, LargeMagnitudeGatesStayFinite) {
  for (DType dt : {DType::kF64, DType::kF32, DType::kBF16}) {
    // gates 40, 800, -800, -1e30, 1e30 (rows of one pair); ups 3, -2, 5, 7, 1.
    Tensor xd = Tensor::from_vector<double>({5, 2}, {40, 3, 800, -2, -800, 5, -1e30, 7, 1e30, 1});
    Tensor x = Tensor::empty({5, 2}, dt), y = Tensor::empty({5, 1}, dt);
    ASSERT_TRUE(convert(ctx(), xd, x).ok());
    Tensor dy = Tensor::empty({5, 1}, dt), dx = Tensor::empty({5, 2}, dt);
    ASSERT_TRUE(convert(ctx(), Tensor::from_vector<double>({5, 1}, {1, 1, 1, 1, 1}), dy).ok());
    ASSERT_TRUE(swiglu_forward(ctx(), x, y).ok());
    ASSERT_TRUE(swiglu_backward(ctx(), x, dy, dx).ok());
    Tensor yd = Tensor::empty({5, 1}, DType::kF64), dxd = Tensor::empty({5, 2}, DType::kF64);
    ASSERT_TRUE(convert(ctx(), y, yd).ok());
    ASSERT_TRUE(convert(ctx(), dx, dxd).ok());
    Tensor xr = Tensor::empty({5, 2}, DType::kF64);  // the inputs as the dtype holds them
    ASSERT_TRUE(convert(ctx(), x, xr).ok());
    const double* in = xr.data<double>();
    const std::vector<double> want_y = {in[0] * in[1], in[2] * in[3], 0, 0, in[8] * in[9]};
    const std::vector<double> want_dx = {in[1], in[0], in[3], in[2], 0, 0, 0, 0, in[9], in[8]};
    for (int i = 0; i < 5; ++i) {
      const double got = yd.data<double>()[i];
      EXPECT_TRUE(std::isfinite(got)) << dtype_name(dt) << " y " << i;
      EXPECT_NEAR(got, want_y[i], 1e-2 * std::fabs(want_y[i])) << dtype_name(dt) << " y " << i;
    }
    for (int i = 0; i < 10; ++i) {
      const double got = dxd.data<double>()[i];
      EXPECT_TRUE(std::isfinite(got)) << dtype_name(dt) << " dx " << i;
      EXPECT_NEAR(got, want_dx[i], 1e-2 * std::fabs(want_dx[i])) << dtype_name(dt) << " dx " << i;
    }
  }
}

// The backward against central differences in f64: L = <w, swiglu(x)> over random x [3, 10]
// (F = 5, gates in [-4, 4]), so dL/dx = swiglu_backward(x, w).
TEST(SwigluTest, BackwardMatchesFiniteDifferences) {
  Tensor x = Tensor::empty({3, 10}, DType::kF64), w = Tensor::empty({3, 5}, DType::kF64);
  testing::fill_uniform(x, 31, -4, 4);
  testing::fill_uniform(w, 32);
  Tensor dx = Tensor::zeros({3, 10}, DType::kF64);
  ASSERT_TRUE(swiglu_backward(ctx(), x, w, dx).ok());
  auto loss = [&]() {
    Tensor y = Tensor::zeros({3, 5}, DType::kF64);
    EXPECT_TRUE(swiglu_forward(ctx(), x, y).ok());
    return testing::dot(y, w);
  };
  for (const std::string& f : testing::check_gradients(loss, {{"x", x, dx}}, {1e-6, 1e-9, 1e-7})) {
    ADD_FAILURE() << f;
  }
}

// bf16 in, bf16 out: computed like f32 on the same values, rounded once more.
TEST(SwigluTest, Bf16MatchesFloatRounded) {
  Tensor xf = Tensor::empty({3, 6}, DType::kF32);
  testing::fill_uniform(xf, 33, -3, 3);
  Tensor xb = Tensor::empty({3, 6}, DType::kBF16), xr = Tensor::empty({3, 6}, DType::kF32);
  ASSERT_TRUE(convert(ctx(), xf, xb).ok());
  ASSERT_TRUE(convert(ctx(), xb, xr).ok());  // the bf16 values, in f32
  Tensor dyb = Tensor::empty({3, 3}, DType::kBF16), dyr = Tensor::empty({3, 3}, DType::kF32);
  testing::fill_uniform(dyb, 34);
  ASSERT_TRUE(convert(ctx(), dyb, dyr).ok());
  Tensor yf = Tensor::empty({3, 3}, DType::kF32), yb = Tensor::empty({3, 3}, DType::kBF16);
  Tensor dxf = Tensor::empty({3, 6}, DType::kF32), dxb = Tensor::empty({3, 6}, DType::kBF16);
  ASSERT_TRUE(swiglu_forward(ctx(), xr, yf).ok());
  ASSERT_TRUE(swiglu_forward(ctx(), xb, yb).ok());
  ASSERT_TRUE(swiglu_backward(ctx(), xr, dyr, dxf).ok());
  ASSERT_TRUE(swiglu_backward(ctx(), xb, dyb, dxb).ok());
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(static_cast<float>(yb.data<bf16>()[i]), static_cast<float>(bf16(yf.data<float>()[i])))
        << i;
  }
  for (int i = 0; i < 18; ++i) {
    EXPECT_EQ(static_cast<float>(dxb.data<bf16>()[i]),
              static_cast<float>(bf16(dxf.data<float>()[i])))
        << i;
  }
}

TEST(SwigluTest, BadArgumentsAreRefusedByName) {
  Tensor x = Tensor::zeros({3, 4}, DType::kF32), y = Tensor::zeros({3, 2}, DType::kF32);
  Tensor dy = Tensor::zeros({3, 2}, DType::kF32), dx = Tensor::zeros({3, 4}, DType::kF32);
  ASSERT_TRUE(swiglu_forward(ctx(), x, y).ok());
  ASSERT_TRUE(swiglu_backward(ctx(), x, dy, dx).ok());
  // The message names the op and the argument: "swiglu_forward: y has shape ...".
  auto refused = [](const Status& s, const char* what) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what << ": " << s.to_string();
    EXPECT_EQ(s.message().rfind("swiglu_", 0), 0u) << s.message();
    EXPECT_NE(s.message().find(std::string(": ") + what + " "), std::string::npos) << s.message();
  };
  refused(swiglu_forward(ctx(), Tensor::zeros({3, 5}, DType::kF32), y), "x");  // odd columns
  refused(swiglu_forward(ctx(), Tensor::zeros({12}, DType::kF32), y), "x");    // not [M, 2F]
  refused(swiglu_forward(ctx(), Tensor::zeros({3, 4}, DType::kI32), y), "x");
  refused(swiglu_forward(ctx(), x, Tensor::zeros({3, 4}, DType::kF32)), "y");
  refused(swiglu_forward(ctx(), x, Tensor::zeros({2, 2}, DType::kF32)), "y");
  refused(swiglu_forward(ctx(), x, Tensor::zeros({3, 2}, DType::kF64)), "y");
  refused(swiglu_forward(ctx(), x, x.view().reshape({6, 2}).rows(0, 3)), "y");  // in place
  refused(swiglu_backward(ctx(), x, Tensor::zeros({3, 4}, DType::kF32), dx), "dy");
  refused(swiglu_backward(ctx(), x, Tensor::zeros({3, 2}, DType::kBF16), dx), "dy");
  refused(swiglu_backward(ctx(), x, dy, Tensor::zeros({3, 2}, DType::kF32)), "dx");
  refused(swiglu_backward(ctx(), x, dy, Tensor::zeros({3, 4}, DType::kF64)), "dx");
  refused(swiglu_backward(ctx(), x, dy, x), "dx");  // in place
  refused(swiglu_backward(ctx(), Tensor::zeros({3, 3}, DType::kF32), dy, dx), "x");
}

// Qwen2-MoE's row gate by hand: logit 0 halves a row, ln 3 keeps three quarters of it; far-out
// logits saturate to 1 and 0 without overflow. dlogit = s (1 - s) <dy, x>.
TEST(SigmoidGateTest, HandValuesOfForwardAndBackward) {
  Tensor x = Tensor::empty({4, 2}, DType::kF64), logit = Tensor::empty({4, 1}, DType::kF64);
  const double xs[] = {2, -4, 1, 3, 5, 6, -7, 8}, ls[] = {0, std::log(3.0), 800, -800};
  for (int i = 0; i < 8; ++i) x.data<double>()[i] = xs[i];
  for (int i = 0; i < 4; ++i) logit.data<double>()[i] = ls[i];
  Tensor y = Tensor::zeros({4, 2}, DType::kF64);
  ASSERT_TRUE(sigmoid_gate_forward(ctx(), x, logit, y).ok());
  const double want_y[] = {1, -2, 0.75, 2.25, 5, 6, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y.data<double>()[i], want_y[i], 1e-15) << i;
  Tensor dy = Tensor::empty({4, 2}, DType::kF64);
  for (int i = 0; i < 8; ++i) dy.data<double>()[i] = 1.0 + i;
  Tensor dx = Tensor::zeros({4, 2}, DType::kF64), dl = Tensor::zeros({4, 1}, DType::kF64);
  ASSERT_TRUE(sigmoid_gate_backward(ctx(), x, logit, dy, dx, dl).ok());
  // Row 0: s = 1/2, <dy, x> = 1*2 + 2*(-4) = -6; row 1: s = 3/4, <dy, x> = 3 + 12 = 15.
  EXPECT_NEAR(dl.data<double>()[0], 0.25 * -6, 1e-15);
  EXPECT_NEAR(dl.data<double>()[1], 0.1875 * 15, 1e-15);
  EXPECT_EQ(dl.data<double>()[2], 0.0);
  EXPECT_EQ(dl.data<double>()[3], 0.0);
  const double want_dx[] = {0.5, 1, 2.25, 3, 5, 6, 0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(dx.data<double>()[i], want_dx[i], 1e-15) << i;
  // dx may be dy itself: the row's sum is taken before dx is written.
  ASSERT_TRUE(sigmoid_gate_backward(ctx(), x, logit, dy, dy, dl).ok());
  EXPECT_TRUE(testing::bitwise_equal(dy, dx));
  EXPECT_NEAR(dl.data<double>()[1], 0.1875 * 15, 1e-15);
}

// L = <w, sigmoid(logit) x> over random x [5, 7] and logits in [-3, 3]: both gradients against
// central differences in f64.
TEST(SigmoidGateTest, BackwardMatchesFiniteDifferences) {
  Tensor x = Tensor::empty({5, 7}, DType::kF64), logit = Tensor::empty({5, 1}, DType::kF64);
  Tensor w = Tensor::empty({5, 7}, DType::kF64);
  testing::fill_uniform(x, 41, -2, 2);
  testing::fill_uniform(logit, 42, -3, 3);
  testing::fill_uniform(w, 43);
  Tensor dx = Tensor::zeros({5, 7}, DType::kF64), dl = Tensor::zeros({5, 1}, DType::kF64);
  ASSERT_TRUE(sigmoid_gate_backward(ctx(), x, logit, w, dx, dl).ok());
  auto loss = [&]() {
    Tensor y = Tensor::zeros({5, 7}, DType::kF64);
    EXPECT_TRUE(sigmoid_gate_forward(ctx(), x, logit, y).ok());
    return testing::dot(y, w);
  };
  for (const std::string& f :
       testing::check_gradients(loss, {{"x", x, dx}, {"logit", logit, dl}}, {1e-6, 1e-9, 1e-7})) {
    ADD_FAILURE() << f;
  }
}

// bf16 rows with f32 logits: the f32 computation on the same values, rounded once more.
TEST(SigmoidGateTest, Bf16MatchesFloatRounded) {
  Tensor xf = Tensor::empty({3, 5}, DType::kF32), logit = Tensor::empty({3, 1}, DType::kF32);
  testing::fill_uniform(xf, 44, -3, 3);
  testing::fill_uniform(logit, 45, -2, 2);
  Tensor xb = Tensor::empty({3, 5}, DType::kBF16), xr = Tensor::empty({3, 5}, DType::kF32);
  ASSERT_TRUE(convert(ctx(), xf, xb).ok());
  ASSERT_TRUE(convert(ctx(), xb, xr).ok());
  Tensor yf = Tensor::empty({3, 5}, DType::kF32), yb = Tensor::empty({3, 5}, DType::kBF16);
  ASSERT_TRUE(sigmoid_gate_forward(ctx(), xr, logit, yf).ok());
  ASSERT_TRUE(sigmoid_gate_forward(ctx(), xb, logit, yb).ok());
  Tensor dlf = Tensor::empty({3, 1}, DType::kF32), dlb = Tensor::empty({3, 1}, DType::kBF16);
  Tensor dxf = Tensor::empty({3, 5}, DType::kF32), dxb = Tensor::empty({3, 5}, DType::kBF16);
  ASSERT_TRUE(sigmoid_gate_backward(ctx(), xr, logit, xr, dxf, dlf).ok());
  ASSERT_TRUE(sigmoid_gate_backward(ctx(), xb, logit, xb, dxb, dlb).ok());
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(static_cast<float>(yb.data<bf16>()[i]), static_cast<float>(bf16(yf.data<float>()[i])))
        << i;
    EXPECT_EQ(static_cast<float>(dxb.data<bf16>()[i]),
              static_cast<float>(bf16(dxf.data<float>()[i])))
        << i;
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(static_cast<float>(dlb.data<bf16>()[r]),
              static_cast<float>(bf16(dlf.data<float>()[r])))
        << r;
  }
}

TEST(SigmoidGateTest, BadArgumentsAreRefusedByName) {
  Tensor x = Tensor::zeros({3, 4}, DType::kF32), logit = Tensor::zeros({3, 1}, DType::kF32);
  Tensor y = Tensor::zeros({3, 4}, DType::kF32), dl = Tensor::zeros({3, 1}, DType::kF32);
  ASSERT_TRUE(sigmoid_gate_forward(ctx(), x, logit, y).ok());
  ASSERT_TRUE(sigmoid_gate_backward(ctx(), x, logit, y, y, dl).ok());
  auto refused = [](const Status& s, const std::string& name) {
    EXPECT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.message().rfind("sigmoid_gate_", 0), 0u) << s.message();
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  };
  refused(sigmoid_gate_forward(ctx(), x, Tensor::zeros({3}, DType::kF32), y), "logit");
  refused(sigmoid_gate_forward(ctx(), x, Tensor::zeros({2, 1}, DType::kF32), y), "logit");
  refused(sigmoid_gate_forward(ctx(), x, Tensor::zeros({3, 1}, DType::kF64), y), "logit");
  refused(sigmoid_gate_forward(ctx(), x, logit, Tensor::zeros({3, 3}, DType::kF32)), "y");
  refused(sigmoid_gate_forward(ctx(), Tensor::zeros({12}, DType::kF32), logit, y), "x");
  refused(sigmoid_gate_backward(ctx(), x, logit, Tensor::zeros({3, 4}, DType::kF64), y, dl), "dy");
  refused(sigmoid_gate_backward(ctx(), x, logit, y, y, Tensor::zeros({3}, DType::kF32)), "dlogit");
  refused(sigmoid_gate_backward(ctx(), x, logit, y, x, dl), "dx");  // over x
}

TEST(BiasTest, RowsAndDroplessBlocks) {
  Tensor x = Tensor::zeros({3, 2}, DType::kF32);
  ASSERT_TRUE(add_bias(ctx(), x, Tensor::from_vector<float>({2}, {1, 2})).ok());
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{1, 2, 1, 2, 1, 2}));
  Tensor dbias = Tensor::from_vector<float>({2}, {1, 1});
  ASSERT_TRUE(bias_grad(ctx(), x, dbias).ok());
  EXPECT_EQ(to_vector<float>(dbias), (std::vector<float>{4, 7}));

  // Dropless blocks (R = 2 ranks, E_l = 2 experts): block b uses expert b % 2; block 1 is empty.
  ExpertBlocks blocks;
  blocks.ranks = 2;
  blocks.local_experts = 2;
  blocks.offsets = {0, 1, 1, 3, 4};
  Tensor y = Tensor::zeros({4, 2}, DType::kF32);
  Tensor bias = Tensor::from_vector<float>({2, 2}, {1, 2, 10, 20});
  ASSERT_TRUE(add_bias_blocks(ctx(), y, bias, blocks).ok());
  // rows: block 0 (expert 0), block 2 (expert 0) x2, block 3 (expert 1).
  EXPECT_EQ(to_vector<float>(y), (std::vector<float>{1, 2, 1, 2, 1, 2, 10, 20}));
  Tensor db = Tensor::from_vector<float>({2, 2}, {1, 1, 1, 1});
  ASSERT_TRUE(bias_grad_blocks(ctx(), y, db, blocks).ok());
  EXPECT_EQ(to_vector<float>(db), (std::vector<float>{4, 7, 11, 21}));
  blocks.offsets = {0, 4};  // wrong block count
  EXPECT_EQ(add_bias_blocks(ctx(), y, bias, blocks).code(), StatusCode::kInvalidArgument);
}

// Capacity blocks with filled prefixes: padding rows are zeroed and never reach the gradient.
TEST(BiasTest, CapacityBlocksSkipPadding) {
  ExpertBlocks blocks;
  blocks.ranks = 1;
  blocks.local_experts = 2;
  blocks.capacity = 2;
  Tensor filled = Tensor::from_vector<int32_t>({2}, {1, 2});
  blocks.filled = filled;
  Tensor y = Tensor::from_vector<double>({4, 1}, {5, 7, 9, 11});  // row 1 is padding
  Tensor bias = Tensor::from_vector<double>({2, 1}, {1, 10});
  ASSERT_TRUE(add_bias_blocks(ctx(), y, bias, blocks).ok());
  EXPECT_EQ(to_vector<double>(y), (std::vector<double>{6, 0, 19, 21}));
  Tensor dy = Tensor::from_vector<double>({4, 1}, {1, 100, 2, 3});  // padding gradient ignored
  Tensor db = Tensor::zeros({2, 1}, DType::kF64);
  ASSERT_TRUE(bias_grad_blocks(ctx(), dy, db, blocks).ok());
  EXPECT_EQ(to_vector<double>(db), (std::vector<double>{1, 5}));
}

TEST(DropoutTest, MaskDependsOnKeysNotPosition) {
  const int64_t n = 64;
  Tensor x = Tensor::empty({2, n}, DType::kF64);
  for (int64_t i = 0; i < 2 * n; ++i) x.data<double>()[i] = 1.0;
  Tensor keys = Tensor::from_vector<int64_t>({2}, {1000, 5});
  Tensor keys_swapped = Tensor::from_vector<int64_t>({2}, {5, 1000});
  CounterRng rng{9, make_stream(RngTag::kDropout, 1, 2)};
  Tensor y = Tensor::zeros({2, n}, DType::kF64), y2 = Tensor::zeros({2, n}, DType::kF64);
  ASSERT_TRUE(dropout_forward(ctx(), x, keys, 0, rng, 0.5f, y).ok());
  ASSERT_TRUE(dropout_forward(ctx(), x, keys_swapped, 0, rng, 0.5f, y2).ok());
  int kept = 0;
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_EQ(y.data<double>()[j], y2.data<double>()[n + j]);
    EXPECT_EQ(y.data<double>()[n + j], y2.data<double>()[j]);
    const double v = y.data<double>()[j];
    EXPECT_TRUE(v == 0.0 || v == 2.0);
    kept += v != 0.0;
  }
  EXPECT_GT(kept, 16);
  EXPECT_LT(kept, 48);
  // Backward applies the same mask.
  Tensor dx = Tensor::zeros({2, n}, DType::kF64);
  ASSERT_TRUE(dropout_backward(ctx(), x, keys, 0, rng, 0.5f, dx).ok());
  EXPECT_EQ(to_vector<double>(dx), to_vector<double>(y));
  EXPECT_EQ(dropout_forward(ctx(), x, keys, 0, rng, 1.0f, y).code(), StatusCode::kInvalidArgument);
  // Without keys, row r is keyed by key_base + r: the same mask as explicit keys.
  Tensor y3 = Tensor::zeros({2, n}, DType::kF64);
  Tensor consecutive = Tensor::from_vector<int64_t>({2}, {1000, 1001});
  ASSERT_TRUE(dropout_forward(ctx(), x, consecutive, 0, rng, 0.5f, y).ok());
  ASSERT_TRUE(dropout_forward(ctx(), x, {}, 1000, rng, 0.5f, y3).ok());
  EXPECT_EQ(to_vector<double>(y3), to_vector<double>(y));
  // A negative key (an empty capacity slot) zeroes its row, even at p = 0.
  Tensor empty_slot = Tensor::from_vector<int64_t>({2}, {-1, 5});
  ASSERT_TRUE(dropout_forward(ctx(), x, empty_slot, 0, rng, 0.f, y3).ok());
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_EQ(y3.data<double>()[j], 0.0);
    EXPECT_EQ(y3.data<double>()[n + j], 1.0);
  }
}

// bf16 activations: computed in float, rounded once; ReLU keeps values exactly.
TEST(ActivationValues, Bf16MatchesFloatRounded) {
  Tensor xf = Tensor::from_vector<float>({4}, {-1.5f, -0.25f, 0.75f, 2.5f});
  Tensor xb = Tensor::empty({4}, DType::kBF16);
  ASSERT_TRUE(convert(ctx(), xf, xb).ok());
  for (Activation act :
       {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh, Activation::kSilu}) {
    Tensor yf = Tensor::empty({4}, DType::kF32), yb = Tensor::empty({4}, DType::kBF16);
    ASSERT_TRUE(activation_forward(ctx(), act, xf, yf).ok());
    ASSERT_TRUE(activation_forward(ctx(), act, xb, yb).ok());
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(static_cast<float>(yb.data<bf16>()[i]),
                static_cast<float>(bf16(yf.data<float>()[i])))
          << activation_name(act) << " at " << i;
    }
  }
}

}  // namespace
}  // namespace moe::kernels
