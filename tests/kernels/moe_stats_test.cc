// Statistics kernels (kernels/moe_stats.h) accumulate exact, hand-computed sums into f64 slots;
// the AC statistics combine min/max over calls and keep the last mean.
#include "kernels/moe_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/testing/gradient_check.h"

namespace moe::kernels {
namespace {

Context& ctx() { return testing::host_context(); }

TEST(MoeStatsTest, SumsAccumulate) {
  Tensor slot = Tensor::zeros({1}, DType::kF64);
  Tensor probs = Tensor::from_vector<double>({2, 2}, {0.5, 0.5, 1.0, 0.0});
  ASSERT_TRUE(entropy_sum(ctx(), probs, slot).ok());
  ASSERT_TRUE(entropy_sum(ctx(), probs, slot).ok());
  EXPECT_NEAR(slot.data<double>()[0], 2 * std::log(2.0), 1e-15);
  Tensor norms = Tensor::zeros({1}, DType::kF64);
  ASSERT_TRUE(row_norm_sum(ctx(), Tensor::from_vector<float>({2, 2}, {3, 4, 0, -2}), norms).ok());
  EXPECT_EQ(norms.data<double>()[0], 7.0);
  Tensor gates = Tensor::zeros({1}, DType::kF64);
  ASSERT_TRUE(
      column_sum(ctx(), Tensor::from_vector<float>({2, 2}, {0.75f, 0.25f, 0.5f, 0.5f}), 0, gates)
          .ok());
  EXPECT_EQ(gates.data<double>()[0], 1.25);
  Tensor loads = Tensor::from_vector<double>({3}, {1, 0, 0});
  ASSERT_TRUE(accumulate_counts(ctx(), Tensor::from_vector<int64_t>({3}, {4, 0, 7}), loads).ok());
  EXPECT_EQ(to_vector<double>(loads), (std::vector<double>{5, 0, 7}));
  Tensor flips = Tensor::zeros({1}, DType::kF64);
  ASSERT_TRUE(count_mismatches(ctx(), Tensor::from_vector<int32_t>({4}, {0, 1, 2, 3}),
                               Tensor::from_vector<int32_t>({4}, {0, 2, 2, 0}), flips)
                  .ok());
  EXPECT_EQ(flips.data<double>()[0], 2);
  EXPECT_EQ(column_sum(ctx(), probs, 2, gates).code(), StatusCode::kInvalidArgument);
}

TEST(MoeStatsTest, SparseMixerCounters) {
  Tensor mask = Tensor::from_vector<uint8_t>({3, 3}, {1, 0, 0, 1, 1, 0, 1, 1, 1});
  Tensor is_argmax = Tensor::from_vector<uint8_t>({3}, {1, 0, 1});
  Tensor scale = Tensor::from_vector<float>({3}, {1.f, 0.5f, 1.f});
  Tensor out = Tensor::zeros({4}, DType::kF64);
  ASSERT_TRUE(sparsemixer_stats(ctx(), mask, is_argmax, scale, out).ok());
  EXPECT_EQ(to_vector<double>(out), (std::vector<double>{6, 1, 1, 1}));
}

TEST(MoeStatsTest, AcStatisticsOverTwoCalls) {
  // E = 2, D = 2. Cluster 0: 4 tokens globally with abs_dev sums (4, 8) -> mean MAD 1.5; this
  // rank holds 2 of them. Cluster 1: empty globally.
  Tensor abs_dev = Tensor::from_vector<double>({2, 2}, {4, 8, 0, 0});
  Tensor counts = Tensor::from_vector<int64_t>({2}, {4, 0});
  Tensor local = Tensor::from_vector<int64_t>({2}, {2, 0});
  Tensor out = Tensor::zeros({2 * 2 + kAcStatsFixed}, DType::kF64);
  ASSERT_TRUE(ac_stats(ctx(), abs_dev, counts, local,
                       Tensor::from_vector<double>({5}, {1, 0, 0.5, 2.0, 1.0}), out)
                  .ok());
  ASSERT_TRUE(ac_stats(ctx(), abs_dev, counts, local,
                       Tensor::from_vector<double>({5}, {1, 0, 0.8, 3.0, 1.2}), out)
                  .ok());
  EXPECT_EQ(to_vector<double>(out),
            (std::vector<double>{4, 0, 6, 0, /*tiny*/ 2, /*min*/ 0.5, /*max*/ 3.0, /*mean*/ 1.2,
                                 /*calls*/ 2}));
}

}  // namespace
}  // namespace moe::kernels
