#include "base/rng.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moe {
namespace {

// Known-answer vectors from Random123's kat_vectors ("philox4x32 10" lines).
TEST(PhiloxTest, KnownAnswers) {
  struct Kat {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t expect[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& kat : kats) {
    uint32_t out[4];
    Philox4x32x10::generate(kat.ctr, kat.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], kat.expect[i]) << "word " << i;
  }
}

TEST(CounterRngTest, DeterministicAndStreamsDiffer) {
  CounterRng a{1234, make_stream(RngTag::kDropout, 3, 17)};
  CounterRng b{1234, make_stream(RngTag::kDropout, 3, 18)};
  EXPECT_EQ(a.u32(99), a.u32(99));
  EXPECT_NE(a.u32(99), b.u32(99));
  EXPECT_NE(a.u32(99), a.u32(100));
}

TEST(CounterRngTest, UniformMomentsAndRange) {
  CounterRng rng{42, make_stream(RngTag::kTest, 0, 0)};
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const float u = rng.uniform(i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_GT(rng.uniform_open(i), 0.0f);
    sum += u;
    sum_sq += static_cast<double>(u) * u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sum_sq / n - (sum / n) * (sum / n), 1.0 / 12.0, 0.002);
}

TEST(CounterRngTest, NormalMoments) {
  CounterRng rng{7, make_stream(RngTag::kInit, 1, 0)};
  const int n = 200000;
  double sum = 0, sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double z = rng.normal(i);
    sum += z;
    sum_sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum_sq / n, 1.0, 0.01);
}

}  // namespace
}  // namespace moe
