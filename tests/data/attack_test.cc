#include "core/data/attack.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moe::data {
namespace {

// A vocabulary with <unk> <eos> AAA and words w0..w9.
Vocabulary word_vocab() {
  std::string text;
  for (int i = 0; i < 10; ++i) text += "w" + std::to_string(i) + " ";
  StatusOr<Vocabulary> v = Vocabulary::build_from_text(text, {});
  EXPECT_TRUE(v.ok());
  return std::move(v).value();
}

// n tokens: every 10th is <eos>, the others words (ids 3..12, never AAA).
std::vector<int32_t> stream(int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    tokens[static_cast<size_t>(i)] =
        i % 10 == 9 ? Vocabulary::kEosId : static_cast<int32_t>(3 + (i * 7) % 10);
  }
  return tokens;
}

TEST(AttackTest, RateCloseToRequestedAndEosNeverSwapped) {
  const Vocabulary vocab = word_vocab();
  const std::vector<int32_t> tokens = stream(200000);
  for (double rate : {0.05, 0.1, 0.5}) {
    StatusOr<AttackResult> r = attack_tokens(tokens, rate, 1234, vocab);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->tokens.size(), tokens.size());
    int64_t words = 0, changed = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == Vocabulary::kEosId) {
        EXPECT_EQ(r->tokens[i], Vocabulary::kEosId) << "eos swapped at " << i;
        continue;
      }
      ++words;
      if (r->tokens[i] != tokens[i]) {
        EXPECT_EQ(r->tokens[i], Vocabulary::kAttackId);
        ++changed;
      }
    }
    EXPECT_EQ(r->word_tokens, words);
    EXPECT_EQ(words, 180000);
    EXPECT_EQ(r->swapped, changed);
    EXPECT_DOUBLE_EQ(r->swap_fraction, static_cast<double>(changed) / words);
    // Binomial sd = sqrt(rate (1 - rate) / 180000) <= 0.0012; allow 5 sd.
    EXPECT_NEAR(r->swap_fraction, rate, 5 * std::sqrt(rate * (1 - rate) / words)) << rate;
  }
}

TEST(AttackTest, ExtremeRates) {
  const Vocabulary vocab = word_vocab();
  const std::vector<int32_t> tokens = stream(1000);
  StatusOr<AttackResult> none = attack_tokens(tokens, 0.0, 1, vocab);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->tokens, tokens);
  EXPECT_EQ(none->swapped, 0);
  EXPECT_EQ(none->swap_fraction, 0.0);
  StatusOr<AttackResult> all = attack_tokens(tokens, 1.0, 1, vocab);
  ASSERT_TRUE(all.ok());
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(all->tokens[i],
              tokens[i] == Vocabulary::kEosId ? Vocabulary::kEosId : Vocabulary::kAttackId);
  }
  EXPECT_EQ(all->swap_fraction, 1.0);
}

TEST(AttackTest, DeterministicAndPositionwise) {
  const Vocabulary vocab = word_vocab();
  const std::vector<int32_t> tokens = stream(5000);
  const AttackResult a = *attack_tokens(tokens, 0.3, 77, vocab);
  const AttackResult b = *attack_tokens(tokens, 0.3, 77, vocab);
  const AttackResult c = *attack_tokens(tokens, 0.3, 78, vocab);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, c.tokens);
  // The coin of position i depends only on i: a prefix attacks the same way.
  const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + 1234);
  const AttackResult p = *attack_tokens(prefix, 0.3, 77, vocab);
  EXPECT_EQ(p.tokens, std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + 1234));
}

TEST(AttackTest, Errors) {
  const Vocabulary vocab = word_vocab();
  EXPECT_EQ(attack_tokens({3, 4}, -0.1, 1, vocab).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(attack_tokens({3, 4}, 1.5, 1, vocab).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(attack_tokens({3, 4}, std::nan(""), 1, vocab).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(attack_tokens({3, 99}, 0.1, 1, vocab).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::data
