// Evaluation does not depend on how the sequences are batched: by default (eval_capacity_factor
// 0) no token is dropped at evaluation, so the perplexity is the same at every batch size; a
// positive eval_capacity_factor restores capacity dropping at evaluation (and with it the
// dependence on the batch).
#include "core/train/evaluator.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/rng.h"
#include "tests/testing/cross_path.h"
#include "tests/testing/gradient_check.h"

namespace moe::testing {
namespace {

ModelConfig model_config(double eval_capacity_factor) {
  ModelConfig m;
  m.vocab_size = 23;
  m.d_model = 8;
  m.n_heads = 2;
  m.seq_len = 6;
  m.d_ff = 12;
  m.init_std = 0.6;  // a peaked router, so that capacity 1.0 drops
  MoeLayerConfig moe;
  moe.d_model = 8;
  moe.d_expert = 6;
  moe.num_experts = 4;
  moe.top_k = 2;
  moe.capacity_factor = 1.0;
  moe.eval_capacity_factor = eval_capacity_factor;
  m.arch = "sgsg";
  m.blocks = expand_arch_string(m.arch, moe).value();
  EXPECT_TRUE(m.validate().ok()) << m.validate().to_string();
  return m;
}

// `split` must outlive the set (which views its ids).
data::SequenceSet sequences(int64_t vocab, int64_t seq_len, int64_t count,
                            data::TokenSplit& split) {
  split.name = "valid";
  split.source = "generated";
  CounterRng rng{5, make_stream(RngTag::kTest, 3, 0)};
  for (int64_t i = 0; i < count * seq_len + 1; ++i) {
    split.ids.push_back(static_cast<int32_t>(rng.u32(i) % vocab));
  }
  return data::SequenceSet::create(split, seq_len).value();
}

// The perplexity at each batch size; with `experts`, each batch size's chosen experts of every
// MoE layer over all 24 sequences ([layer] -> [24 * S, K], in sequence order).
std::vector<double> perplexities(double eval_capacity_factor, const std::vector<int64_t>& batches,
                                 std::vector<std::vector<Tensor>>* experts = nullptr) {
  const ModelConfig cfg = model_config(eval_capacity_factor);
  auto model = TransformerLM::create(cfg, &host_context(), DType::kF64, nullptr).value();
  EXPECT_TRUE(model->init_parameters(3).ok());
  data::TokenSplit split;
  const data::SequenceSet set = sequences(cfg.vocab_size, cfg.seq_len, 24, split);
  std::vector<double> out;
  for (int64_t b : batches) {
    std::vector<RoutingDecisions> routing;
    StatusOr<EvalResult> r =
        evaluate_perplexity(model.get(), set, {b, 0, 1, nullptr, nullptr, nullptr, &routing});
    if (!r.ok()) {
      ADD_FAILURE() << r.status().to_string();
      return out;
    }
    if (experts != nullptr) {  // batches of b sequences, MoE layers inner: stack per layer
      EXPECT_EQ(24 % b, 0) << "a padded last batch would not fit the stacked rows";
      if (24 % b != 0) return out;
      const int layers = model->num_moe_layers();
      std::vector<Tensor>& mine = experts->emplace_back();
      for (int l = 0; l < layers; ++l) {
        Tensor all = Tensor::empty({24 * cfg.seq_len, cfg.blocks[0].moe_cfg.top_k}, DType::kI32);
        for (size_t i = l; i < routing.size(); i += layers) {
          const int64_t row = static_cast<int64_t>(i / layers) * b * cfg.seq_len;
          std::copy_n(routing[i].experts.data<int32_t>(), routing[i].experts.numel(),
                      all.data<int32_t>() + row * all.dim(1));
        }
        mine.push_back(all);
      }
    }
    EXPECT_EQ(r->tokens, 24 * cfg.seq_len);
    out.push_back(r->perplexity());
  }
  return out;
}

// Batch sizes are two paths (other GEMM shapes, other rounding): cross-path equality
// (tests/testing/cross_path.h). The routing decisions first, every token's experts equal; then
// the perplexities within f64 epsilon x (the forward's depth x 256-term sums + ln(ppl)).
TEST(EvaluatorTest, PerplexityDoesNotDependOnTheBatchByDefault) {
  std::vector<std::vector<Tensor>> experts;
  const std::vector<int64_t> batches = {1, 3, 8, 24};
  const std::vector<double> ppl = perplexities(0.0, batches, &experts);
  ASSERT_EQ(experts.size(), batches.size());
  const double tol =
      loss_tolerance(kF64Eps, forward_depth(model_config(0.0)).total * 256.0, std::log(ppl[0]));
  for (size_t i = 1; i < ppl.size(); ++i) {
    for (size_t l = 0; l < experts[0].size(); ++l) {
      EXPECT_TRUE(same_decisions(str_cat("batch ", batches[i], " layer ", l), experts[i][l],
                                 experts[0][l]));
    }
    EXPECT_LE(std::fabs(std::log(ppl[i] / ppl[0])), tol) << "batch " << batches[i];
  }
}

TEST(EvaluatorTest, APositiveEvalCapacityDropsAtEvaluation) {
  // One sequence per batch: 6 tokens, C = ceil(1.0 * 6 * 2 / 4) = 3 rows per expert; 24 per batch:
  // C = 72. The routed tokens differ, so the perplexities do.
  const std::vector<double> ppl = perplexities(1.0, {1, 24});
  const std::vector<double> dropless = perplexities(0.0, {1});
  EXPECT_GT(std::abs(ppl[0] - ppl[1]), 1e-6 * ppl[0]);
  EXPECT_GT(std::abs(ppl[0] - dropless[0]), 1e-6 * ppl[0]);
}

TEST(EvaluatorTest, RejectsANegativeEvalCapacity) {
  ModelConfig m = model_config(0.0);
  m.blocks[0].moe_cfg.eval_capacity_factor = -1;
  Status s = m.validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("eval_capacity_factor"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace moe::testing

namespace moe::testing {
namespace {

// Perplexity per word and bits per byte: the split's tokens per word and per byte scale the mean
// token loss; with the word tokenizer (a token is a word) the word perplexity is the perplexity.
TEST(EvaluatorTest, WordPerplexityAndBitsPerByte) {
  const ModelConfig cfg = model_config(0.0);
  auto model = TransformerLM::create(cfg, &host_context(), DType::kF64, nullptr).value();
  ASSERT_TRUE(model->init_parameters(3).ok());
  data::TokenSplit split;
  (void)sequences(cfg.vocab_size, cfg.seq_len, 10, split);
  const int64_t n = split.size();
  // No text counts (a generated split): neither is reported.
  {
    const data::SequenceSet set = data::SequenceSet::create(split, cfg.seq_len).value();
    const EvalResult r =
        evaluate_perplexity(model.get(), set, {4, 0, 1, nullptr, nullptr, nullptr, nullptr})
            .value();
    EXPECT_FALSE(r.word_perplexity().has_value());
    EXPECT_FALSE(r.bits_per_byte().has_value());
  }
  // A word-level split: as many words as tokens.
  split.stats.words = n;
  split.stats.bytes = 5 * n + 3;
  {
    const data::SequenceSet set = data::SequenceSet::create(split, cfg.seq_len).value();
    const EvalResult r =
        evaluate_perplexity(model.get(), set, {4, 0, 1, nullptr, nullptr, nullptr, nullptr})
            .value();
    ASSERT_TRUE(r.word_perplexity().has_value());
    EXPECT_EQ(*r.word_perplexity(), r.perplexity());
    const double bpb = r.loss_sum / static_cast<double>(r.tokens) * static_cast<double>(n) /
                       static_cast<double>(5 * n + 3) / std::log(2.0);
    EXPECT_NEAR(*r.bits_per_byte(), bpb, 1e-12 * bpb);
  }
  // A subword split, 1.5 tokens per word: word PPL = PPL^1.5.
  split.stats.words = n * 2 / 3;
  {
    const data::SequenceSet set = data::SequenceSet::create(split, cfg.seq_len).value();
    const EvalResult r =
        evaluate_perplexity(model.get(), set, {4, 0, 1, nullptr, nullptr, nullptr, nullptr})
            .value();
    const double tpw = static_cast<double>(n) / static_cast<double>(n * 2 / 3);
    EXPECT_NEAR(*r.word_perplexity(), std::pow(r.perplexity(), tpw), 1e-9 * *r.word_perplexity());
  }
}

// A subset (the first sequences of a larger set) says so: its perplexity is over its tokens, its
// <unk> share is counted over them (with the tokenizer's <unk> id; unknown without one), and its
// measures per word and per byte are estimates at the whole set's ratios. The whole set's figures
// stay the set's.
TEST(EvaluatorTest, ASubsetsFiguresAreItsOwnOrMarkedEstimates) {
  const ModelConfig cfg = model_config(0.0);
  auto model = TransformerLM::create(cfg, &host_context(), DType::kF64, nullptr).value();
  ASSERT_TRUE(model->init_parameters(3).ok());
  data::TokenSplit split;
  (void)sequences(cfg.vocab_size, cfg.seq_len, 10, split);
  const int32_t unk = 0;
  // <unk> at 4 of the 13 tokens the first 2 sequences cover ([0, 12], S = 6) and 3 after them.
  for (int32_t& id : split.ids) id = id == unk ? 1 : id;
  for (size_t i : {0, 5, 6, 12, 20, 30, 60}) split.ids[i] = unk;
  split.stats.words = split.size();
  split.stats.bytes = 4 * split.size();
  split.stats.unknown = 7;
  const data::SequenceSet set = data::SequenceSet::create(split, cfg.seq_len).value();
  const EvalResult whole =
      evaluate_perplexity(model.get(), set, {4, 0, 1, nullptr, nullptr, nullptr, nullptr, unk})
          .value();
  EXPECT_FALSE(whole.subset);
  EXPECT_EQ(whole.unknown_fraction, set.unknown_fraction());
  const EvalResult first =
      evaluate_perplexity(model.get(), set, {4, 2, 1, nullptr, nullptr, nullptr, nullptr, unk})
          .value();
  EXPECT_TRUE(first.subset);
  EXPECT_EQ(first.tokens, 2 * cfg.seq_len);
  EXPECT_EQ(first.unknown_fraction, 4.0 / static_cast<double>(2 * cfg.seq_len + 1));
  EXPECT_EQ(first.tokens_per_word, set.tokens_per_word());  // the estimate's ratio, not its own
  const EvalResult blind =
      evaluate_perplexity(model.get(), set, {4, 2, 1, nullptr, nullptr, nullptr, nullptr}).value();
  EXPECT_EQ(blind.unknown_fraction, -1.0);
  // As many sequences as the set has, or more: the whole set.
  const EvalResult all =
      evaluate_perplexity(model.get(), set, {4, 10, 1, nullptr, nullptr, nullptr, nullptr, unk})
          .value();
  EXPECT_FALSE(all.subset);
  EXPECT_EQ(all.unknown_fraction, whole.unknown_fraction);
}

}  // namespace
}  // namespace moe::testing
