#include "core/data/sequences.h"

#include <gtest/gtest.h>

#include "tests/data/data_test_util.h"

namespace moe::data {
namespace {

using testing::contains;

TokenSplit make_split(int64_t n) {
  TokenSplit split;
  split.name = "train";
  split.source = "/data/train.txt";
  for (int64_t i = 0; i < n; ++i) split.ids.push_back(static_cast<int32_t>(100 + i));
  return split;
}

TEST(SequencesTest, CountIsFloorOfNMinusOneOverS) {
  EXPECT_EQ(*count_sequences(10, 3, "f"), 3);  // [0..3] [3..6] [6..9]
  EXPECT_EQ(*count_sequences(9, 3, "f"), 2);   // token 8 would need token 9
  EXPECT_EQ(*count_sequences(4, 3, "f"), 1);
  EXPECT_EQ(*count_sequences(2, 1, "f"), 1);
  const Status s = count_sequences(3, 3, "/data/valid.txt").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "/data/valid.txt")) << s.message();
  EXPECT_TRUE(contains(s.message(), "3 tokens")) << s.message();
  EXPECT_TRUE(contains(s.message(), "S = 3")) << s.message();
  EXPECT_EQ(count_sequences(10, 0, "f").status().code(), StatusCode::kInvalidArgument);
}

TEST(SequencesTest, FillInputsAndShiftedTargets) {
  const TokenSplit split = make_split(23);  // S = 5 -> floor(22/5) = 4 sequences
  StatusOr<SequenceSet> set = SequenceSet::create(split, 5);
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->size(), 4);
  const std::vector<int64_t> ids = {3, 0, 3};
  Tensor inputs = Tensor::zeros({3, 5}, DType::kI32);
  Tensor targets = Tensor::zeros({3, 5}, DType::kI32);
  ASSERT_TRUE(set->fill(ids, inputs, targets).ok());
  const std::vector<int32_t> in = to_vector<int32_t>(inputs);
  const std::vector<int32_t> out = to_vector<int32_t>(targets);
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int t = 0; t < 5; ++t) {
      EXPECT_EQ(in[r * 5 + t], 100 + ids[r] * 5 + t);
      EXPECT_EQ(out[r * 5 + t], 100 + ids[r] * 5 + t + 1);
    }
  }
  // Sequence 3 ends on token 20, which is the last target; 21 and 22 are the unused tail.
  EXPECT_EQ(out[4], 120);
}

TEST(SequencesTest, BoundaryTokenIsShared) {
  const TokenSplit split = make_split(13);
  StatusOr<SequenceSet> set = SequenceSet::create(split, 4);  // 3 sequences
  ASSERT_TRUE(set.ok());
  Tensor inputs = Tensor::zeros({3, 4}, DType::kI32);
  Tensor targets = Tensor::zeros({3, 4}, DType::kI32);
  ASSERT_TRUE(set->fill({0, 1, 2}, inputs, targets).ok());
  const std::vector<int32_t> in = to_vector<int32_t>(inputs);
  const std::vector<int32_t> out = to_vector<int32_t>(targets);
  // Every token 101..112 is a target exactly once; 100..111 are inputs exactly once.
  std::vector<int32_t> want_in, want_out;
  for (int i = 0; i < 12; ++i) {
    want_in.push_back(100 + i);
    want_out.push_back(101 + i);
  }
  EXPECT_EQ(in, want_in);
  EXPECT_EQ(out, want_out);
}

TEST(SequencesTest, LeadingTokensAreThoseTheFirstSequencesCover) {
  const TokenSplit split = make_split(23);  // S = 5: 4 sequences, tokens 21 and 22 the tail
  StatusOr<SequenceSet> set = SequenceSet::create(split, 5);
  ASSERT_TRUE(set.ok());
  StatusOr<std::vector<int32_t>> two = set->leading_tokens(2);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(*two, std::vector<int32_t>(split.ids.begin(), split.ids.begin() + 11));  // [0, 10]
  EXPECT_EQ(set->leading_tokens(4)->size(), 21u);
  EXPECT_EQ(set->leading_tokens(0).status().code(), StatusCode::kInvalidArgument);
  const Status past = set->leading_tokens(5).status();
  EXPECT_EQ(past.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(past.message(), "/data/train.txt")) << past.message();
}

TEST(SequencesTest, Errors) {
  const TokenSplit tiny = make_split(5);
  const Status s = SequenceSet::create(tiny, 5).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "/data/train.txt")) << s.message();
  EXPECT_TRUE(contains(s.message(), "5 tokens")) << s.message();
  EXPECT_TRUE(contains(s.message(), "S = 5")) << s.message();

  const TokenSplit split = make_split(11);
  StatusOr<SequenceSet> set = SequenceSet::create(split, 5);
  ASSERT_TRUE(set.ok());
  Tensor good = Tensor::zeros({1, 5}, DType::kI32);
  Tensor good2 = Tensor::zeros({1, 5}, DType::kI32);
  Tensor wide = Tensor::zeros({1, 6}, DType::kI32);
  Tensor f32 = Tensor::zeros({1, 5}, DType::kF32);
  EXPECT_EQ(set->fill({0}, wide, good).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(set->fill({0}, good, f32).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(set->fill({0, 1}, good, good2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(set->fill({2}, good, good2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(set->fill({-1}, good, good2).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(set->fill({1}, good, good2).ok());
}

TEST(SequencesTest, EvalBatchesCoverAllInOrder) {
  EXPECT_EQ(num_eval_batches(10, 4), 3);
  EXPECT_EQ(num_eval_batches(8, 4), 2);
  EXPECT_EQ(num_eval_batches(0, 4), 0);
  std::vector<int64_t> all;
  for (int64_t b = 0; b < num_eval_batches(10, 4); ++b) {
    const std::vector<int64_t> ids = eval_batch_ids(10, 4, b);
    EXPECT_LE(ids.size(), 4u);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(all, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(eval_batch_ids(10, 4, 2), (std::vector<int64_t>{8, 9}));
}

}  // namespace
}  // namespace moe::data
