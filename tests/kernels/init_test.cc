// Initialisation kernels (kernels/init.h): values equal the documented counter draws, are
// reproducible, a shard with its global offset gets its slice of the whole tensor, sample moments
// match the requested distribution, and bad tensors are rejected.
#include "kernels/init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

using moe::testing::bitwise_equal;

using moe::testing::expect_invalid;

Context& ctx() { return testing::host_context(); }

TEST(InitTest, NormalIsTheCounterDrawScaled) {
  const CounterRng rng{17, make_stream(RngTag::kInit, 0, 42)};
  Tensor t = Tensor::empty({3, 5}, DType::kF64);
  ASSERT_TRUE(init_normal(ctx(), t, 0.02, rng).ok());
  for (int64_t i = 0; i < t.numel(); ++i) {
    EXPECT_EQ(t.data<double>()[i],
              0.02 * static_cast<double>(rng.normal(static_cast<uint64_t>(i))));
  }
  Tensor again = Tensor::empty({3, 5}, DType::kF64);
  ASSERT_TRUE(init_normal(ctx(), again, 0.02, rng).ok());
  EXPECT_TRUE(bitwise_equal(again, t));
  // Rows 1..2 as a shard starting at element 5.
  Tensor shard = Tensor::empty({2, 5}, DType::kF64);
  ASSERT_TRUE(init_normal(ctx(), shard, 0.02, rng, 5).ok());
  EXPECT_TRUE(bitwise_equal(shard, t.view().rows(1, 3)));
  // Another stream gives other values.
  Tensor other = Tensor::empty({3, 5}, DType::kF64);
  ASSERT_TRUE(
      init_normal(ctx(), other, 0.02, CounterRng{17, make_stream(RngTag::kInit, 0, 43)}).ok());
  EXPECT_FALSE(bitwise_equal(other, t));
}

TEST(InitTest, NormalMomentsAndConstant) {
  Tensor t = Tensor::empty({20000}, DType::kF32);
  ASSERT_TRUE(init_normal(ctx(), t, 0.5, CounterRng{1, make_stream(RngTag::kInit, 0, 1)}).ok());
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    sum += t.data<float>()[i];
    sq += static_cast<double>(t.data<float>()[i]) * t.data<float>()[i];
  }
  const double mean = sum / t.numel(), sd = std::sqrt(sq / t.numel() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);  // standard error 0.5 / sqrt(20000) = 0.0035
  EXPECT_NEAR(sd, 0.5, 0.02);
  ASSERT_TRUE(init_constant(ctx(), t, 1.0).ok());
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], 1.0f);
  Tensor zero_sd = Tensor::empty({4}, DType::kF64);
  ASSERT_TRUE(init_normal(ctx(), zero_sd, 0.0, CounterRng{}).ok());
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(zero_sd.data<double>()[i], 0.0);
  // bf16 (a working copy): the draw rounded once.
  Tensor b = Tensor::empty({8}, DType::kBF16);
  const CounterRng rng{3, make_stream(RngTag::kInit, 0, 2)};
  ASSERT_TRUE(init_normal(ctx(), b, 0.5, rng).ok());
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(
        static_cast<float>(b.data<bf16>()[i]),
        static_cast<float>(bf16(static_cast<float>(0.5 * static_cast<double>(rng.normal(i))))));
  }
}

TEST(InitTest, BadArgumentsAreInvalidArgument) {
  expect_invalid(init_normal(ctx(), Tensor::zeros({3}, DType::kI32), 1.f, CounterRng{}),
                 {"init_normal", "t"});
  expect_invalid(init_normal(ctx(), Tensor::zeros({3}, DType::kF32), -1.0, CounterRng{}),
                 {"init_normal", "stddev"});
  expect_invalid(init_constant(ctx(), Tensor::zeros({3}, DType::kI64), 1.0),
                 {"init_constant", "t"});
}

}  // namespace
}  // namespace moe::kernels
