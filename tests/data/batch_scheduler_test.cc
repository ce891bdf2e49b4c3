#include "core/data/batch_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tests/data/data_test_util.h"

namespace moe::data {
namespace {

using testing::contains;

BatchScheduler make(int64_t n, int64_t g, uint64_t seed) {
  StatusOr<BatchScheduler> s = BatchScheduler::create(n, g, seed);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST(BatchSchedulerTest, Deterministic) {
  BatchScheduler a = make(101, 8, 42);
  BatchScheduler b = make(101, 8, 42);
  BatchScheduler c = make(101, 8, 43);
  bool differs = false;
  for (int step = 0; step < 40; ++step) {
    const std::vector<int64_t> ga = a.next();
    EXPECT_EQ(ga, b.next()) << "step " << step;
    differs = differs || ga != c.next();
  }
  EXPECT_TRUE(differs) << "another seed gave the same batches";
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  EXPECT_NE(a.epoch_order(0), iota(101)) << "epoch 0 is not shuffled";
}

TEST(BatchSchedulerTest, EverySequenceOncePerEpoch) {
  // 37 sequences, batches of 5: batches straddle epoch boundaries.
  const int64_t n = 37, g = 5;
  BatchScheduler s = make(n, g, 7);
  std::vector<int64_t> stream;
  while (static_cast<int64_t>(stream.size()) < 3 * n) {
    const std::vector<int64_t> batch = s.next();
    ASSERT_EQ(static_cast<int64_t>(batch.size()), g);
    stream.insert(stream.end(), batch.begin(), batch.end());
  }
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> epoch(stream.begin() + e * n, stream.begin() + (e + 1) * n);
    EXPECT_EQ(epoch, s.epoch_order(static_cast<uint64_t>(e))) << "epoch " << e;
    std::sort(epoch.begin(), epoch.end());
    EXPECT_EQ(epoch, iota(n)) << "epoch " << e;
  }
  // After 23 steps = 115 ids: epoch 3, position 115 - 111 = 4.
  EXPECT_EQ(s.cursor().step, 23);
  EXPECT_EQ(s.cursor().epoch, 3u);
  EXPECT_EQ(s.cursor().position, 4);
}

TEST(BatchSchedulerTest, GlobalBatchLargerThanEpoch) {
  BatchScheduler s = make(3, 7, 1);
  const std::vector<int64_t> batch = s.next();  // epochs 0, 1 and one id of epoch 2
  ASSERT_EQ(batch.size(), 7u);
  for (int e = 0; e < 2; ++e) {
    std::vector<int64_t> part(batch.begin() + 3 * e, batch.begin() + 3 * e + 3);
    std::sort(part.begin(), part.end());
    EXPECT_EQ(part, iota(3));
  }
  EXPECT_EQ(s.cursor().epoch, 2u);
  EXPECT_EQ(s.cursor().position, 1);
}

TEST(BatchSchedulerTest, ShuffleIsUniform) {
  // Where does sequence 0 land across 4000 epochs of a 4-element shuffle? Each position has
  // probability 1/4 (a Sattolo-style off-by-one would never leave it in place).
  BatchScheduler s = make(4, 4, 99);
  int64_t at[4] = {0, 0, 0, 0};
  for (uint64_t e = 0; e < 4000; ++e) {
    const std::vector<int64_t> order = s.epoch_order(e);
    for (int p = 0; p < 4; ++p) {
      if (order[static_cast<size_t>(p)] == 0) ++at[p];
    }
  }
  for (int p = 0; p < 4; ++p) {
    EXPECT_NEAR(at[p], 1000, 120) << "position " << p;  // sd ~ 27
  }
}

TEST(BatchSchedulerTest, GlobalBatchIndependentOfDpSize) {
  BatchScheduler s = make(1000, 16, 5);
  for (int step = 0; step < 10; ++step) {
    const std::vector<int64_t> global = s.next();
    for (int dp : {1, 2, 4}) {
      std::vector<int64_t> joined;
      for (int r = 0; r < dp; ++r) {
        StatusOr<std::vector<int64_t>> slice = split_for_rank(global, dp, r);
        ASSERT_TRUE(slice.ok()) << slice.status().to_string();
        EXPECT_EQ(slice->size(), global.size() / dp);
        joined.insert(joined.end(), slice->begin(), slice->end());
      }
      EXPECT_EQ(joined, global) << "dp " << dp << " step " << step;
    }
  }
  // Rank 1 of 4 holds ids [4, 8) of the batch.
  const std::vector<int64_t> g = iota(16);
  EXPECT_EQ(*split_for_rank(g, 4, 1), (std::vector<int64_t>{4, 5, 6, 7}));
}

TEST(BatchSchedulerTest, IndivisibleBatchIsAnError) {
  const Status s = split_for_rank(iota(6), 4, 0).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "6")) << s.message();
  EXPECT_TRUE(contains(s.message(), "divisible")) << s.message();
  EXPECT_TRUE(contains(s.message(), "4")) << s.message();
  EXPECT_EQ(split_for_rank(iota(8), 4, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(split_for_rank(iota(8), 0, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(BatchSchedulerTest, BalancedSplitForEvaluation) {
  const std::vector<int64_t> ids = iota(10);
  std::vector<int64_t> joined;
  std::vector<size_t> sizes;
  for (int r = 0; r < 4; ++r) {
    const std::vector<int64_t> slice = split_balanced_for_rank(ids, 4, r);
    sizes.push_back(slice.size());
    joined.insert(joined.end(), slice.begin(), slice.end());
  }
  EXPECT_EQ(joined, ids);
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 3, 2, 2}));
  EXPECT_TRUE(split_balanced_for_rank(iota(2), 4, 3).empty());
}

TEST(BatchSchedulerTest, CursorSaveRestoreContinuesIdentically) {
  BatchScheduler original = make(53, 6, 2024);
  for (int i = 0; i < 17; ++i) original.next();
  const DataCursor saved = original.cursor();
  EXPECT_EQ(saved.step, 17);
  EXPECT_EQ(saved, original.cursor_at_step(17));
  // 17 * 6 = 102 = 1 * 53 + 49.
  EXPECT_EQ(saved.epoch, 1u);
  EXPECT_EQ(saved.position, 49);

  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 20; ++i) expected.push_back(original.next());

  BatchScheduler resumed = make(53, 6, 2024);
  ASSERT_TRUE(resumed.restore(saved).ok());
  EXPECT_EQ(resumed.peek(), expected[0]);
  EXPECT_EQ(resumed.cursor(), saved);  // peek does not advance
  for (int i = 0; i < 20; ++i) EXPECT_EQ(resumed.next(), expected[i]) << "step " << 17 + i;
  EXPECT_EQ(resumed.cursor(), original.cursor());

  DataCursor bad = saved;
  bad.position = 53;
  EXPECT_EQ(resumed.restore(bad).code(), StatusCode::kInvalidArgument);
  bad = saved;
  bad.step = -1;
  EXPECT_EQ(resumed.restore(bad).code(), StatusCode::kInvalidArgument);
}

TEST(BatchSchedulerTest, CreateErrors) {
  EXPECT_EQ(BatchScheduler::create(0, 4, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BatchScheduler::create(4, 0, 1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::data
