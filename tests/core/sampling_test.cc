// momoe-generate's sampling rule (core/inference/sampling.h) on hand-computed distributions:
// greedy and its ties, top-k 1 = greedy, the draw's cumulative order, top-k and top-p cut-offs,
// temperature, and the refused options and logits. Also the counter-based f64 draw it uses.
#include "core/inference/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "base/rng.h"
#include "tests/testing/status_expect.h"

namespace moe {
namespace {

using testing::expect_invalid;

int32_t pick(const std::vector<double>& logits, const SamplingOptions& o, double u) {
  return sample_token(logits, o, u).value();
}

SamplingOptions options(double temperature, int64_t top_k = 0, double top_p = 1.0) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  return o;
}

TEST(SamplingTest, GreedyTakesTheArgmaxAndTheLowestIdOnTies) {
  EXPECT_EQ(pick({0.5, 2.0, -1.0, 1.9}, options(0), 0.99), 1);
  EXPECT_EQ(pick({1.0, 3.0, 3.0, 3.0}, options(0), 0.0), 1);
  EXPECT_EQ(pick({7.0}, options(0), 0.5), 0);
}

TEST(SamplingTest, TopKOneIsGreedyForEveryDraw) {
  const std::vector<double> logits = {0.1, 1.5, 1.5, -2.0, 0.7};
  for (double u = 0.0; u < 1.0; u += 0.01) {
    EXPECT_EQ(pick(logits, options(1.0, 1), u), pick(logits, options(0), u));
    EXPECT_EQ(pick(logits, options(5.0, 1), u), 1);
  }
}

TEST(SamplingTest, DrawsInOrderOfProbability) {
  // p = [0.25, 0.75]: id 1 comes first, so u < 0.75 picks it.
  const std::vector<double> logits = {std::log(1.0), std::log(3.0)};
  EXPECT_EQ(pick(logits, options(1.0), 0.0), 1);
  EXPECT_EQ(pick(logits, options(1.0), 0.74), 1);
  EXPECT_EQ(pick(logits, options(1.0), 0.76), 0);
  EXPECT_EQ(pick(logits, options(1.0), 0.999999), 0);
  // Temperature 2: p ~ [sqrt 1, sqrt 3] = [0.366, 0.634].
  EXPECT_EQ(pick(logits, options(2.0), 0.62), 1);
  EXPECT_EQ(pick(logits, options(2.0), 0.65), 0);
  // A very high temperature is uniform; ties keep the lowest id first.
  EXPECT_EQ(pick({0.0, 10.0}, options(1e9), 0.49), 1);
  EXPECT_EQ(pick({0.0, 10.0}, options(1e9), 0.51), 0);
  EXPECT_EQ(pick({2.0, 2.0, 2.0}, options(1.0), 0.0), 0);
  EXPECT_EQ(pick({2.0, 2.0, 2.0}, options(1.0), 0.5), 1);
  EXPECT_EQ(pick({2.0, 2.0, 2.0}, options(1.0), 0.9), 2);
}

TEST(SamplingTest, TopKAndTopPKeepOnlyTheHead) {
  // p = [0.2, 0.5, 0.3]: order 1, 2, 0.
  const std::vector<double> logits = {std::log(0.2), std::log(0.5), std::log(0.3)};
  std::set<int32_t> top2, nucleus, tiny;
  for (double u = 0.0; u < 1.0; u += 0.001) {
    top2.insert(pick(logits, options(1.0, 2), u));
    // 0.5 < 0.75 <= 0.5 + 0.3: ids 1 and 2.
    nucleus.insert(pick(logits, options(1.0, 0, 0.75), u));
    tiny.insert(pick(logits, options(1.0, 0, 0.1), u));
  }
  EXPECT_EQ(top2, (std::set<int32_t>{1, 2}));
  EXPECT_EQ(nucleus, (std::set<int32_t>{1, 2}));
  EXPECT_EQ(tiny, std::set<int32_t>{1});
  // Renormalised over the kept ids: 0.5 / 0.8 = 0.625.
  EXPECT_EQ(pick(logits, options(1.0, 2), 0.62), 1);
  EXPECT_EQ(pick(logits, options(1.0, 2), 0.63), 2);
  EXPECT_EQ(pick(logits, options(1.0, 0, 0.75), 0.63), 2);
  // top-k then top-p: the nucleus of the two kept ids (0.5 / 0.8 >= 0.6).
  EXPECT_EQ(pick(logits, options(1.0, 2, 0.6), 0.99), 1);
  // top-k larger than the vocabulary keeps everything.
  EXPECT_EQ(pick(logits, options(1.0, 10), 0.99), 0);
}

TEST(SamplingTest, RefusesBadOptionsAndLogits) {
  EXPECT_TRUE(validate(options(0.0, 0, 1.0)).ok());
  expect_invalid(validate(options(-0.5)), {"--temperature -0.5"});
  expect_invalid(validate(options(NAN)), {"--temperature"});
  expect_invalid(validate(options(1.0, -1)), {"--top-k -1"});
  expect_invalid(validate(options(1.0, 0, 0.0)), {"--top-p 0", "(0, 1]"});
  expect_invalid(validate(options(1.0, 0, 1.5)), {"--top-p 1.5"});
  const Status nan = sample_token({0.0, NAN}, options(1.0), 0.5).status();
  EXPECT_EQ(nan.code(), StatusCode::kDataLoss);
  EXPECT_NE(nan.message().find("logit of token 1"), std::string::npos) << nan.message();
  EXPECT_EQ(sample_token({}, options(1.0), 0.5).status().code(), StatusCode::kInvalidArgument);
}

TEST(SamplingTest, TheF64DrawIsInTheUnitIntervalAndKeyedByIndex) {
  const CounterRng rng{42, make_stream(RngTag::kSampling, 0, 0)};
  double sum = 0;
  for (uint64_t i = 0; i < 10000; ++i) {
    const double u = rng.uniform_f64(i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
  EXPECT_EQ(rng.uniform_f64(7), rng.uniform_f64(7));
  EXPECT_NE(rng.uniform_f64(7), rng.uniform_f64(8));
  EXPECT_NE(rng.uniform_f64(7), (CounterRng{43, rng.stream}.uniform_f64(7)));
}

}  // namespace
}  // namespace moe
