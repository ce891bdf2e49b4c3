#include "kernels/activation.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moe::kernels {
namespace {

class ActivationTest : public ::testing::TestWithParam<Activation> {};

// The derivative against central differences in double precision.
TEST_P(ActivationTest, BackwardMatchesFiniteDifferences) {
  const Activation act = GetParam();
  std::vector<double> xs = {-3.0, -1.3, -0.2, 0.05, 0.7, 2.4};
  Tensor x = Tensor::from_vector<double>({6}, xs);
  Tensor dy = Tensor::from_vector<double>({6}, {1, 1, 1, 1, 1, 1});
  Tensor dx = Tensor::zeros({6}, DType::kF64);
  ASSERT_TRUE(activation_backward(act, x, dy, dx).ok());
  const double h = 1e-6;
  for (int i = 0; i < 6; ++i) {
    Tensor xp = Tensor::from_vector<double>({1}, {xs[i] + h});
    Tensor xm = Tensor::from_vector<double>({1}, {xs[i] - h});
    Tensor yp = Tensor::zeros({1}, DType::kF64), ym = Tensor::zeros({1}, DType::kF64);
    ASSERT_TRUE(activation_forward(act, xp, yp).ok());
    ASSERT_TRUE(activation_forward(act, xm, ym).ok());
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
  ASSERT_TRUE(activation_forward(Activation::kGelu, x, y).ok());
  EXPECT_NEAR(y.data<double>()[2], 0.8413447460685429, 1e-12);  // Phi(1)
  EXPECT_NEAR(y.data<double>()[0], -0.15865525393145707, 1e-12);
  ASSERT_TRUE(activation_forward(Activation::kRelu, x, y).ok());
  EXPECT_EQ(to_vector<double>(y), (std::vector<double>{0.0, 0.0, 1.0}));
}

TEST(GroupedBiasTest, AddsPerGroupAndAccumulatesGrad) {
  Tensor x = Tensor::zeros({4, 2}, DType::kF32);
  Tensor bias = Tensor::from_vector<float>({2, 2}, {1, 2, 10, 20});
  ASSERT_TRUE(add_bias_grouped(x, bias, {0, 1, 4}).ok());
  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{1, 2, 10, 20, 10, 20, 10, 20}));
  Tensor db = Tensor::from_vector<float>({2, 2}, {1, 1, 1, 1});
  ASSERT_TRUE(bias_grad_grouped(x, db, {0, 1, 4}).ok());
  EXPECT_EQ(to_vector<float>(db), (std::vector<float>{2, 3, 31, 61}));
  EXPECT_EQ(add_bias_grouped(x, bias, {0, 4}).code(), StatusCode::kInvalidArgument);
}

TEST(DropoutTest, MaskDependsOnKeysNotPosition) {
  const int64_t n = 64;
  Tensor x = Tensor::empty({2, n}, DType::kF64);
  for (int64_t i = 0; i < 2 * n; ++i) x.data<double>()[i] = 1.0;
  Tensor keys = Tensor::from_vector<int64_t>({2}, {1000, 5});
  Tensor keys_swapped = Tensor::from_vector<int64_t>({2}, {5, 1000});
  CounterRng rng{9, make_stream(RngTag::kDropout, 1, 2)};
  Tensor y = Tensor::zeros({2, n}, DType::kF64), y2 = Tensor::zeros({2, n}, DType::kF64);
  ASSERT_TRUE(dropout_forward(x, keys, rng, 0.5f, y).ok());
  ASSERT_TRUE(dropout_forward(x, keys_swapped, rng, 0.5f, y2).ok());
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
  ASSERT_TRUE(dropout_backward(x, keys, rng, 0.5f, dx).ok());
  EXPECT_EQ(to_vector<double>(dx), to_vector<double>(y));
  EXPECT_EQ(dropout_forward(x, keys, rng, 1.0f, y).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::kernels
