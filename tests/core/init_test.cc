// Initialisation helpers (core/layers/init.h): values equal the documented counter draws, are
// reproducible, a shard with its global offset gets its slice of the whole tensor, sample moments
// match the requested distribution, and bad tensors are rejected.
#include "core/layers/init.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/core/dense_layer_test_util.h"

namespace moe::testing {
namespace {

TEST(InitTest, NormalIsTheCounterDrawScaled) {
  const CounterRng rng{17, make_stream(RngTag::kInit, 0, 42)};
  Tensor t = Tensor::empty({3, 5}, DType::kF64);
  ASSERT_TRUE(init_normal(t, 0.02, rng).ok());
  for (int64_t i = 0; i < t.numel(); ++i) {
    EXPECT_EQ(t.data<double>()[i],
              0.02 * static_cast<double>(rng.normal(static_cast<uint64_t>(i))));
  }
  Tensor again = Tensor::empty({3, 5}, DType::kF64);
  ASSERT_TRUE(init_normal(again, 0.02, rng).ok());
  EXPECT_TRUE(bitwise_equal(again, t));
  // Rows 1..2 as a shard starting at element 5.
  Tensor shard = Tensor::empty({2, 5}, DType::kF64);
  ASSERT_TRUE(init_normal(shard, 0.02, rng, 5).ok());
  EXPECT_TRUE(bitwise_equal(shard, t.view().rows(1, 3)));
  // Another stream gives other values.
  Tensor other = Tensor::empty({3, 5}, DType::kF64);
  ASSERT_TRUE(init_normal(other, 0.02, CounterRng{17, make_stream(RngTag::kInit, 0, 43)}).ok());
  EXPECT_FALSE(bitwise_equal(other, t));
}

TEST(InitTest, NormalMomentsAndConstant) {
  Tensor t = Tensor::empty({20000}, DType::kF32);
  ASSERT_TRUE(init_normal(t, 0.5, CounterRng{1, make_stream(RngTag::kInit, 0, 1)}).ok());
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    sum += t.data<float>()[i];
    sq += static_cast<double>(t.data<float>()[i]) * t.data<float>()[i];
  }
  const double mean = sum / t.numel(), sd = std::sqrt(sq / t.numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);  // standard error 0.5 / sqrt(20000) = 0.0035
  EXPECT_NEAR(sd, 0.5, 0.02);
  ASSERT_TRUE(init_constant(t, 1.0).ok());
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], 1.0f);
  Tensor zero_sd = Tensor::empty({4}, DType::kF64);
  ASSERT_TRUE(init_normal(zero_sd, 0.0, CounterRng{}).ok());
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(zero_sd.data<double>()[i], 0.0);
}

TEST(InitTest, BadArgumentsAreInvalidArgument) {
  expect_invalid(init_normal(Tensor::zeros({3}, DType::kI32), 1.f, CounterRng{}),
                 {"init_normal", "t"});
  expect_invalid(init_normal(Tensor::zeros({3}, DType::kF32), -1.0, CounterRng{}),
                 {"init_normal", "stddev"});
  expect_invalid(init_constant(Tensor::zeros({3}, DType::kI64), 1.0), {"init_constant", "t"});
}

}  // namespace
}  // namespace moe::testing
