// Loss-free balancing's bias update (kernels/load_balance.h), checked by hand over a few steps:
// the experts above the mean load move down by the rate, those below move up, those at the mean
// stay; the update is exact in both f32 and f64 for rates that are powers of two; bad arguments.
#include "kernels/load_balance.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

Context& ctx() { return testing::host_context(); }

TEST(LoadBalanceTest, ThreeStepsByHand) {
  for (DType dt : {DType::kF64, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor bias = Tensor::zeros({4}, DType::kF64);
    if (dt == DType::kF32) bias = Tensor::zeros({4}, DType::kF32);
    auto values = [&]() {
      std::vector<double> v;
      for (int e = 0; e < 4; ++e) {
        v.push_back(dt == DType::kF64 ? bias.data<double>()[e] : bias.data<float>()[e]);
      }
      return v;
    };
    const double rate = 0.125;  // a power of two: every sum below is exact
    // Step 1: loads (10, 2, 6, 6), mean 6: expert 0 down, expert 1 up, 2 and 3 at the mean.
    ASSERT_TRUE(
        score_bias_update(ctx(), Tensor::from_vector<double>({4}, {10, 2, 6, 6}), rate, bias).ok());
    EXPECT_EQ(values(), (std::vector<double>{-0.125, 0.125, 0, 0}));
    // Step 2: loads (7, 7, 1, 9), mean 6: 0, 1 and 3 down, 2 up.
    ASSERT_TRUE(
        score_bias_update(ctx(), Tensor::from_vector<double>({4}, {7, 7, 1, 9}), rate, bias).ok());
    EXPECT_EQ(values(), (std::vector<double>{-0.25, 0, 0.125, -0.125}));
    // Step 3: a balanced step (mean 5 everywhere) changes nothing; rate 0 changes nothing.
    ASSERT_TRUE(
        score_bias_update(ctx(), Tensor::from_vector<double>({4}, {5, 5, 5, 5}), rate, bias).ok());
    ASSERT_TRUE(
        score_bias_update(ctx(), Tensor::from_vector<double>({4}, {9, 0, 0, 0}), 0.0, bias).ok());
    EXPECT_EQ(values(), (std::vector<double>{-0.25, 0, 0.125, -0.125}));
  }
}

TEST(LoadBalanceTest, AMeanThatIsNotAnIntegerComparesExactly) {
  // Loads (1, 2, 2), mean 5/3: expert 0 is below (up), 1 and 2 above (down).
  Tensor bias = Tensor::from_vector<double>({3}, {0.5, 0.5, 0.5});
  ASSERT_TRUE(
      score_bias_update(ctx(), Tensor::from_vector<double>({3}, {1, 2, 2}), 0.25, bias).ok());
  EXPECT_EQ(to_vector<double>(bias), (std::vector<double>{0.75, 0.25, 0.25}));
}

TEST(LoadBalanceTest, ArgumentErrors) {
  Tensor bias = Tensor::zeros({3}, DType::kF32);
  const Tensor load = Tensor::zeros({3}, DType::kF64);
  testing::expect_invalid(score_bias_update(ctx(), Tensor::zeros({3}, DType::kF32), 1, bias),
                          {"score_bias_update", "load"});
  testing::expect_invalid(score_bias_update(ctx(), Tensor::zeros({4}, DType::kF64), 1, bias),
                          {"score_bias_update", "bias"});
  testing::expect_invalid(score_bias_update(ctx(), load, -1, bias), {"rate = -1"});
  testing::expect_invalid(score_bias_update(ctx(), load, 1, Tensor::zeros({3}, DType::kI32)),
                          {"bias"});
}

}  // namespace
}  // namespace moe::kernels
