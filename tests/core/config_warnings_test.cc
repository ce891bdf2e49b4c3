// The start-up's size-trap warnings (core/train/config_warnings.h), on the hand-counted tiny model
// of model_size_test (D 8, two blocks: 1,740 parameters with a vocabulary of 10, of which the
// untied token table and head hold 2 x 10 x 8 = 160): the vocabulary's share by size and cap, the
// word-vocabulary options beside a prepared dataset, and a run that is all warm-up.
#include "core/train/config_warnings.h"

#include <gtest/gtest.h>

#include "proto/run_convert.h"

namespace moe {
namespace {

// The tiny model with `vocab` entries, `model_more` inside its model block and the extra config
// text `more`.
RunConfig tiny(int64_t vocab, const std::string& more = "", const std::string& model_more = "") {
  StatusOr<RunConfig> cfg =
      parse_run_config(str_cat("model { vocab_size: ", vocab,
                               " d_model: 8 n_heads: 2 seq_len: 4 d_ff: 16 arch: \"sgsf\" "
                               "moe { num_experts: 4 top_k: 1 d_expert: 8 } ",
                               model_more, " } ", more),
                       "tiny");
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  return *cfg;
}

bool mentions(const std::vector<std::string>& lines, const std::string& needle) {
  for (const std::string& l : lines) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(ConfigWarningsTest, AVocabularyThatMakesMostOfTheModel) {
  // Vocabulary 10: 160 of 1,740 parameters (9.2%): nothing to say.
  EXPECT_TRUE(config_warnings(tiny(10)).empty());
  // Vocabulary 100: 1,600 of 3,180 (50.3%): said for an uncapped word vocabulary, naming the
  // share and the cap to set ...
  const std::vector<std::string> uncapped = config_warnings(tiny(100));
  ASSERT_EQ(uncapped.size(), 1u);
  EXPECT_TRUE(mentions(uncapped, "50.31%")) << uncapped[0];
  EXPECT_TRUE(mentions(uncapped, "data.vocab_max_size (now 0: no cap)")) << uncapped[0];
  // ... not when the config capped it there (what it asks for), nor tied (800 of 2,380).
  EXPECT_TRUE(config_warnings(tiny(100, "data { vocab_max_size: 100 }")).empty());
  const std::vector<std::string> tied = config_warnings(tiny(100, "", "tie_embeddings: true"));
  EXPECT_TRUE(tied.empty()) << tied[0];
  // Vocabulary 1,000: 16,000 of 17,580 (91.0%): said even when capped.
  const std::vector<std::string> capped =
      config_warnings(tiny(1000, "data { vocab_max_size: 1000 }"));
  ASSERT_EQ(capped.size(), 1u);
  EXPECT_TRUE(mentions(capped, "91.01%")) << capped[0];
}

TEST(ConfigWarningsTest, WordVocabularyOptionsBesideADataset) {
  const std::string dataset = "data { dataset: \"/data/mine\" train: \"\" valid: \"\" test: \"\" ";
  EXPECT_TRUE(config_warnings(tiny(10, dataset + "}")).empty());
  const std::vector<std::string> w = config_warnings(tiny(10, dataset + "vocab_max_size: 500 }"));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(mentions(w, "do not apply to data.dataset /data/mine")) << w[0];
  EXPECT_TRUE(mentions(w, "its tokenizer has 10 entries")) << w[0];
}

TEST(ConfigWarningsTest, ARunThatIsAllWarmUp) {
  const std::string warm = "train { steps: 30 schedule { warmup_steps: 30 } }";
  const std::vector<std::string> w = config_warnings(tiny(10, warm));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_TRUE(mentions(w, "the whole run is warm-up")) << w[0];
  // Its last step runs at the full rate (step i of the warm-up at (i + 1) / 30 of it).
  EXPECT_TRUE(mentions(w, "reaches only at its last step")) << w[0];
  const std::vector<std::string> shorter =
      config_warnings(tiny(10, "train { steps: 20 schedule { warmup_steps: 30 } }"));
  ASSERT_EQ(shorter.size(), 1u);
  EXPECT_TRUE(mentions(shorter, "never reaches")) << shorter[0];
  EXPECT_TRUE(
      config_warnings(tiny(10, "train { steps: 31 schedule { warmup_steps: 30 } }")).empty());
}

}  // namespace
}  // namespace moe
