#include "kernels/activation.h"

#include <gtest/gtest.h>

#include <cmath>

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
                                           Activation::kGeluTanh));

TEST(ActivationValues, KnownPoints) {
  Tensor x = Tensor::from_vector<double>({3}, {-1.0, 0.0, 1.0});
  Tensor y = Tensor::zeros({3}, DType::kF64);
  ASSERT_TRUE(activation_forward(ctx(), Activation::kGelu, x, y).ok());
  EXPECT_NEAR(y.data<double>()[2], 0.8413447460685429, 1e-12);  // Phi(1)
  EXPECT_NEAR(y.data<double>()[0], -0.15865525393145707, 1e-12);
  ASSERT_TRUE(activation_forward(ctx(), Activation::kRelu, x, y).ok());
  EXPECT_EQ(to_vector<double>(y), (std::vector<double>{0.0, 0.0, 1.0}));
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
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh}) {
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
