// base/fast_divmod.h against the compiler's division: every divisor up to 4096 with the
// numerators around its multiples, divisors at and around every power of two up to 2^62 and
// 2^63 - 1, and
// random divisors of every bit length with random numerators up to 2^63 - 1. The device code runs
// the same arithmetic with __umul64hi in place of the 128-bit product.
#include "base/fast_divmod.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace moe {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Checks div and divmod for d at the given numerators; returns the failures (at most a few
// reported).
int check(int64_t d, const std::vector<int64_t>& numerators) {
  const FastDivmod f(d);
  int failures = 0;
  for (const int64_t n : numerators) {
    int64_t q = -1, r = -1;
    f.divmod(n, &q, &r);
    if (f.div(n) != n / d || q != n / d || r != n % d) {
      if (++failures <= 3) ADD_FAILURE() << n << " / " << d << ": got " << q << " r " << r;
    }
  }
  return failures;
}

// 0, 1, 2^63 - 1 and the multiples of d near 0, 2^31, 2^32 and 2^63 - 1, each with its
// neighbours (no signed overflow on the way).
std::vector<int64_t> edges(int64_t d) {
  std::vector<int64_t> n = {0, 1, kMax, kMax - 1};
  for (const int64_t base : {int64_t{0}, int64_t{1} << 31, int64_t{1} << 32, kMax / d * d}) {
    const int64_t first = base / d * d;  // a multiple of d
    for (int64_t k = 0; k < 3 && first <= kMax - 1 && k <= (kMax - 1 - first) / d; ++k) {
      const int64_t m = first + k * d;  // <= 2^63 - 2: m + 1 does not overflow
      for (const int64_t delta : {int64_t{-1}, int64_t{0}, int64_t{1}}) {
        if (m + delta >= 0) n.push_back(m + delta);
      }
    }
  }
  return n;
}

TEST(FastDivmodTest, EverySmallDivisorNearItsMultiples) {
  for (int64_t d = 1; d <= 4096; ++d) ASSERT_EQ(check(d, edges(d)), 0) << "d = " << d;
}

TEST(FastDivmodTest, PowersOfTwoTheirNeighboursAndTheLargest) {
  ASSERT_EQ(check(kMax, edges(kMax)), 0);
  for (int p = 0; p <= 62; ++p) {
    for (const int64_t delta : {int64_t{-1}, int64_t{0}, int64_t{1}}) {
      const int64_t d = (int64_t{1} << p) + delta;
      if (d < 1) continue;
      ASSERT_EQ(check(d, edges(d)), 0) << "d = " << d;
    }
  }
}

TEST(FastDivmodTest, RandomDivisorsAndNumerators) {
  std::mt19937_64 rng(20261128);
  for (int bits = 1; bits <= 63; ++bits) {
    for (int trial = 0; trial < 50; ++trial) {
      // Any divisor of up to `bits` bits, even ones included (the top bit set half the time).
      const int64_t d = std::max<int64_t>(1, static_cast<int64_t>(rng() >> (64 - bits)));
      std::vector<int64_t> n = edges(d);
      for (int i = 0; i < 200; ++i) n.push_back(static_cast<int64_t>(rng() >> (1 + rng() % 63)));
      ASSERT_EQ(check(d, n), 0) << "d = " << d;
    }
  }
}

TEST(FastDivmodTest, ANonPositiveDivisorIsOne) {
  EXPECT_EQ(FastDivmod(0).divisor(), 1);
  EXPECT_EQ(FastDivmod(0).div(77), 77);
  EXPECT_EQ(FastDivmod().div(kMax), kMax);
}

}  // namespace
}  // namespace moe
