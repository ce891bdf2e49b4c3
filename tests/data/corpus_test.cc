#include "core/data/corpus.h"

#include <gtest/gtest.h>

#include "base/hash.h"
#include "io/file_util.h"
#include "tests/data/data_test_util.h"

namespace moe::data {
namespace {

using testing::contains;
using testing::TempDir;

// train: "x" x3, "y" x2, "z" x1, 2 lines -> vocab <unk> <eos> AAA x y z.
constexpr const char* kTrain = "x y x\nz x y\n";
constexpr const char* kValid = "y q x\n";
constexpr const char* kTest = "z\n\nx x\n";

class CorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_file(dir_.file("train.txt"), kTrain);
    testing::write_gzip(dir_.file("valid.txt.gz"), kValid);
    testing::write_file(dir_.file("test.txt"), kTest);
    spec_.name = "tiny/corpus";
    spec_.train_path = dir_.file("train.txt");
    spec_.valid_path = dir_.file("valid.txt.gz");
    spec_.test_path = dir_.file("test.txt");
    cache_ = dir_.file("cache");
  }

  static void expect_tiny(const TokenizedCorpus& c) {
    EXPECT_EQ(c.vocab.tokens(), (std::vector<std::string>{"<unk>", "<eos>", "AAA", "x", "y", "z"}));
    EXPECT_EQ(c.train.ids, (std::vector<int32_t>{3, 4, 3, 1, 5, 3, 4, 1}));
    EXPECT_EQ(c.valid.ids, (std::vector<int32_t>{4, 0, 3, 1}));
    EXPECT_EQ(c.test.ids, (std::vector<int32_t>{5, 1, 3, 3, 1}));
    EXPECT_EQ(c.train.name, "train");
    EXPECT_EQ(c.valid.name, "valid");
    EXPECT_EQ(c.test.name, "test");
  }

  TempDir dir_;
  CorpusSpec spec_;
  std::string cache_;
};

TEST_F(CorpusTest, BuildWithoutCache) {
  StatusOr<TokenizedCorpus> c = build_corpus(spec_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  expect_tiny(*c);
  EXPECT_FALSE(c->from_cache);
  EXPECT_EQ(c->vocab_source, spec_.train_path);
  EXPECT_EQ(c->valid.source, spec_.valid_path);
}

TEST_F(CorpusTest, SecondCallHitsTheCache) {
  StatusOr<TokenizedCorpus> first = load_or_build_corpus(spec_, cache_);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_FALSE(first->from_cache);
  expect_tiny(*first);
  // One vocabulary and three token files, no temporaries.
  int vocab_files = 0, tok_files = 0, other = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache_)) {
    const std::string name = e.path().filename().string();
    EXPECT_EQ(name.rfind("tiny_corpus-", 0), 0u) << name;
    if (e.path().extension() == ".vocab") {
      ++vocab_files;
    } else if (e.path().extension() == ".tok") {
      ++tok_files;
    } else {
      ++other;
    }
  }
  EXPECT_EQ(vocab_files, 1);
  EXPECT_EQ(tok_files, 3);
  EXPECT_EQ(other, 0);

  StatusOr<TokenizedCorpus> second = load_or_build_corpus(spec_, cache_);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->cache_note, "");
  expect_tiny(*second);
  EXPECT_EQ(second->vocab.fingerprint(), first->vocab.fingerprint());
  EXPECT_EQ(second->vocab.count(3), 3);
}

TEST_F(CorpusTest, ChangedTextRebuilds) {
  ASSERT_TRUE(load_or_build_corpus(spec_, cache_).ok());
  testing::write_file(spec_.train_path, "w w w w\n");
  StatusOr<TokenizedCorpus> c = load_or_build_corpus(spec_, cache_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FALSE(c->from_cache);
  EXPECT_EQ(c->vocab.tokens(), (std::vector<std::string>{"<unk>", "<eos>", "AAA", "w"}));
  EXPECT_EQ(c->valid.ids, (std::vector<int32_t>{0, 0, 0, 1}));
  // Other vocabulary options: another cache entry.
  CorpusSpec capped = spec_;
  capped.vocab.max_size = 3;
  StatusOr<TokenizedCorpus> d = load_or_build_corpus(capped, cache_);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->from_cache);
  EXPECT_EQ(d->vocab.size(), 3);
}

TEST_F(CorpusTest, CorruptedCacheIsRebuilt) {
  ASSERT_TRUE(load_or_build_corpus(spec_, cache_).ok());
  std::string tok;
  for (const auto& e : std::filesystem::directory_iterator(cache_)) {
    if (e.path().filename().string().find(".valid.tok") != std::string::npos) {
      tok = e.path().string();
    }
  }
  ASSERT_FALSE(tok.empty());
  std::string bytes = testing::read_file(tok);
  bytes[bytes.size() - 1] = static_cast<char>(bytes[bytes.size() - 1] ^ 0x40);
  testing::write_file(tok, bytes);

  StatusOr<TokenizedCorpus> c = load_or_build_corpus(spec_, cache_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_FALSE(c->from_cache);
  EXPECT_TRUE(contains(c->cache_note, "DATA_LOSS")) << c->cache_note;
  EXPECT_TRUE(contains(c->cache_note, tok)) << c->cache_note;
  expect_tiny(*c);
  StatusOr<TokenizedCorpus> again = load_or_build_corpus(spec_, cache_);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_cache);
  expect_tiny(*again);
}

TEST_F(CorpusTest, SavedVocabularyIsUsed) {
  StatusOr<Vocabulary> other = Vocabulary::build_from_text("z z z q q\n", {});
  ASSERT_TRUE(other.ok());
  spec_.vocab_path = dir_.file("other.vocab");
  ASSERT_TRUE(other->save(spec_.vocab_path).ok());
  StatusOr<TokenizedCorpus> c = load_or_build_corpus(spec_, cache_);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->vocab.fingerprint(), other->fingerprint());
  EXPECT_EQ(c->vocab_source, spec_.vocab_path);
  // vocab: <unk> <eos> AAA z q
  EXPECT_EQ(c->train.ids, (std::vector<int32_t>{0, 0, 0, 1, 3, 0, 0, 1}));
  EXPECT_EQ(c->valid.ids, (std::vector<int32_t>{0, 4, 0, 1}));
}

TEST_F(CorpusTest, OptionalSplitsMayBeAbsent) {
  spec_.valid_path.clear();
  spec_.test_path.clear();
  StatusOr<TokenizedCorpus> c = load_or_build_corpus(spec_, cache_);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->valid.present());
  EXPECT_TRUE(c->valid.ids.empty());
  StatusOr<TokenizedCorpus> again = load_or_build_corpus(spec_, cache_);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->from_cache);
  EXPECT_EQ(again->train.size(), 8);
}

TEST_F(CorpusTest, ErrorsNameTheFile) {
  CorpusSpec missing = spec_;
  missing.valid_path = dir_.file("no-such-valid.txt");
  for (const std::string& cache : {std::string(), cache_}) {
    StatusOr<TokenizedCorpus> c = load_or_build_corpus(missing, cache);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(contains(c.status().message(), missing.valid_path)) << c.status().message();
  }
  CorpusSpec empty = spec_;
  empty.test_path = dir_.file("empty.txt");
  testing::write_file(empty.test_path, "");
  StatusOr<TokenizedCorpus> e = load_or_build_corpus(empty, cache_);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.status().message(), empty.test_path));

  CorpusSpec no_train = spec_;
  no_train.train_path.clear();
  EXPECT_EQ(load_or_build_corpus(no_train, cache_).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::data
