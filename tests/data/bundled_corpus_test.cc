// Reads the bundled Brown corpus (data/brown/) and checks its token counts against counts made
// here with plain C++ over zlib's decompressed bytes, and against the published word counts.
#include <gtest/gtest.h>

#include <sstream>

#include "core/data/corpus.h"
#include "core/data/text_reader.h"
#include "tests/data/data_test_util.h"

namespace moe::data {
namespace {

std::string brown(const std::string& split) {
  return std::string(MOE_SOURCE_DIR) + "/data/brown/" + split + ".txt.gz";
}

struct Counted {
  int64_t words = 0;
  int64_t nonempty_lines = 0;
};

// Independent count: std::getline and operator>> (whitespace in the "C" locale).
Counted count_independently(const std::string& text) {
  Counted c;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string w;
    int64_t n = 0;
    while (words >> w) ++n;
    c.words += n;
    if (n > 0) ++c.nonempty_lines;
  }
  return c;
}

TEST(BundledCorpusTest, ValidSplitTokenCount) {
  const std::string path = brown("valid");
  const std::string text = testing::read_gzip(path);
  ASSERT_FALSE(text.empty()) << "cannot read " << path;
  const Counted want = count_independently(text);
  EXPECT_EQ(want.words, 115661);  // data/brown/README.md

  StatusOr<std::vector<std::string>> tokens = read_tokens(path);
  ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
  EXPECT_EQ(static_cast<int64_t>(tokens->size()), want.words + want.nonempty_lines);
  int64_t eos = 0;
  for (const std::string& t : *tokens) eos += t == "<eos>" ? 1 : 0;
  EXPECT_EQ(eos, want.nonempty_lines);
  ASSERT_GE(tokens->size(), 3u);
  EXPECT_EQ((*tokens)[0], "City");
  EXPECT_EQ((*tokens)[1], "Controller");
  EXPECT_EQ(tokens->back(), "<eos>");
}

TEST(BundledCorpusTest, AllSplitsBuildAndCache) {
  testing::TempDir dir;
  CorpusSpec spec;
  spec.name = "brown";
  spec.train_path = brown("train");
  spec.valid_path = brown("valid");
  spec.test_path = brown("test");
  StatusOr<TokenizedCorpus> c = load_or_build_corpus(spec, dir.file("cache"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FALSE(c->from_cache);
  const Counted train = count_independently(testing::read_gzip(spec.train_path));
  const Counted test = count_independently(testing::read_gzip(spec.test_path));
  EXPECT_EQ(train.words, 929728);
  EXPECT_EQ(test.words, 115803);
  EXPECT_EQ(c->train.size(), train.words + train.nonempty_lines);
  EXPECT_EQ(c->test.size(), test.words + test.nonempty_lines);
  EXPECT_EQ(c->vocab.count(Vocabulary::kEosId), train.nonempty_lines);
  EXPECT_EQ(c->vocab.token(3), "the");  // the most frequent word of the Brown corpus
  // Every training word is in the vocabulary (min_count 1, no cap).
  int64_t unk = 0;
  for (int32_t id : c->train.ids) unk += id == Vocabulary::kUnkId ? 1 : 0;
  EXPECT_EQ(unk, 0);

  StatusOr<TokenizedCorpus> again = load_or_build_corpus(spec, dir.file("cache"));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(again->valid.ids, c->valid.ids);
  EXPECT_EQ(again->vocab.fingerprint(), c->vocab.fingerprint());
}

}  // namespace
}  // namespace moe::data
