#include "core/data/vocabulary.h"

#include <gtest/gtest.h>

#include "base/hash.h"
#include "io/file_util.h"
#include "tests/data/data_test_util.h"

namespace moe::data {
namespace {

using testing::contains;
using testing::TempDir;
using Tokens = std::vector<std::string>;

// Counts by construction:  the x4, b x2, a x2, B x2, caf\xC3\xA9 x2, zebra x1, "," x3,
// AAA x1, <unk> x1; 4 non-empty lines -> <eos> x4.
const char* kText =
    "the b a the ,\n"
    "B caf\xC3\xA9 the zebra\n"
    "\n"
    "a b B , AAA\n"
    "the caf\xC3\xA9 , <unk>\n";

Vocabulary build(const VocabOptions& options) {
  StatusOr<Vocabulary> v = Vocabulary::build_from_text(kText, options);
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  return v.ok() ? std::move(v).value() : Vocabulary();
}

TEST(VocabularyTest, SpecialTokensAlwaysFirst) {
  const Vocabulary empty;
  EXPECT_EQ(empty.tokens(), (Tokens{"<unk>", "<eos>", "AAA"}));
  EXPECT_EQ(empty.id("<unk>"), Vocabulary::kUnkId);
  EXPECT_EQ(empty.id("<eos>"), Vocabulary::kEosId);
  EXPECT_EQ(empty.id("AAA"), Vocabulary::kAttackId);
  EXPECT_EQ(Vocabulary::kUnkId, 0);
  EXPECT_EQ(Vocabulary::kEosId, 1);
  EXPECT_EQ(Vocabulary::kAttackId, 2);
}

TEST(VocabularyTest, OrderByCountThenBytes) {
  const Vocabulary v = build({});
  // Descending count; ties in byte order: "B" (0x42) < "a" (0x61) < "b" < "caf\xC3\xA9".
  const Tokens want = {"<unk>", "<eos>", "AAA", "the", ",", "B", "a", "b", "caf\xC3\xA9", "zebra"};
  EXPECT_EQ(v.tokens(), want);
  const std::vector<int64_t> want_counts = {1, 4, 1, 4, 3, 2, 2, 2, 2, 1};
  for (int32_t i = 0; i < v.size(); ++i) EXPECT_EQ(v.count(i), want_counts[i]) << v.token(i);
}

TEST(VocabularyTest, MinCountAndMaxSize) {
  {
    const Vocabulary v = build({/*max_size=*/0, /*min_count=*/3});
    EXPECT_EQ(v.tokens(), (Tokens{"<unk>", "<eos>", "AAA", "the", ","}));
    // <unk>: the literal <unk> (1) + B, a, b, cafe (2 each) + zebra (1).
    EXPECT_EQ(v.count(Vocabulary::kUnkId), 1 + 8 + 1);
  }
  {
    const Vocabulary v = build({/*max_size=*/6, /*min_count=*/1});
    EXPECT_EQ(v.tokens(), (Tokens{"<unk>", "<eos>", "AAA", "the", ",", "B"}));
    EXPECT_EQ(v.count(Vocabulary::kUnkId), 1 + 2 + 2 + 2 + 1);
  }
  {
    const Vocabulary v = build({/*max_size=*/3, /*min_count=*/1});
    EXPECT_EQ(v.size(), 3);
  }
  EXPECT_EQ(Vocabulary::build_from_text(kText, {2, 1}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Vocabulary::build_from_text(kText, {0, 0}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(VocabularyTest, UnknownWordsMapToUnk) {
  const Vocabulary v = build({});
  EXPECT_EQ(v.id("never-seen"), Vocabulary::kUnkId);
  EXPECT_EQ(v.id("The"), Vocabulary::kUnkId);  // case-sensitive
  EXPECT_EQ(v.id(""), Vocabulary::kUnkId);
  EXPECT_FALSE(v.contains("never-seen"));
  EXPECT_TRUE(v.contains("zebra"));
  EXPECT_EQ(v.id("zebra"), 9);
  EXPECT_EQ(v.encode("the zebra flies\nAAA"), (std::vector<int32_t>{3, 9, 0, 1, 2, 1}));
  // AAA exists even when the training text has none.
  StatusOr<Vocabulary> plain = Vocabulary::build_from_text("x y\n", {});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->id("AAA"), Vocabulary::kAttackId);
  EXPECT_EQ(plain->count(Vocabulary::kAttackId), 0);
}

TEST(VocabularyTest, CopiesKeepWorkingLookups) {
  Vocabulary copy;
  {
    const Vocabulary v = build({});
    copy = v;
    Vocabulary copy2(v);
    EXPECT_EQ(copy2.id("zebra"), 9);
  }
  EXPECT_EQ(copy.id("zebra"), 9);
  EXPECT_EQ(copy.id("caf\xC3\xA9"), 8);
  Vocabulary moved = std::move(copy);
  EXPECT_EQ(moved.id("the"), 3);
}

// Independent FNV-1a 64 of the token list (8-byte little-endian length, then bytes).
uint64_t reference_fingerprint(const Tokens& tokens) {
  uint64_t h = 14695981039346656037ull;
  const auto byte = [&](unsigned char b) {
    h ^= b;
    h *= 1099511628211ull;
  };
  for (const std::string& t : tokens) {
    for (int i = 0; i < 8; ++i) byte(static_cast<unsigned char>((t.size() >> (8 * i)) & 0xFF));
    for (char c : t) byte(static_cast<unsigned char>(c));
  }
  return h;
}

TEST(VocabularyTest, FingerprintIsStableAndSensitive) {
  // Published FNV-1a 64 test vectors.
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);

  const Vocabulary v = build({});
  EXPECT_EQ(v.fingerprint(), reference_fingerprint(v.tokens()));
  EXPECT_EQ(Vocabulary().fingerprint(), reference_fingerprint({"<unk>", "<eos>", "AAA"}));
  // Same tokens, different counts: same fingerprint.
  StatusOr<Vocabulary> twice = Vocabulary::build_from_text(std::string(kText) + kText, {});
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->tokens(), v.tokens());
  EXPECT_EQ(twice->fingerprint(), v.fingerprint());
  // One more word, one word fewer, or a changed order: different fingerprints.
  StatusOr<Vocabulary> more = Vocabulary::build_from_text(std::string(kText) + "yak\n", {});
  ASSERT_TRUE(more.ok());
  EXPECT_NE(more->fingerprint(), v.fingerprint());
  EXPECT_NE(build({9, 1}).fingerprint(), v.fingerprint());
  StatusOr<Vocabulary> reordered =
      Vocabulary::build_from_text(std::string(kText) + "zebra zebra zebra zebra\n", {});
  ASSERT_TRUE(reordered.ok());
  EXPECT_EQ(reordered->size(), v.size());
  EXPECT_NE(reordered->fingerprint(), v.fingerprint());
  // Token boundaries matter: ["ab", "c"] vs ["a", "bc"].
  EXPECT_NE(vocab_fingerprint({"ab", "c"}), vocab_fingerprint({"a", "bc"}));
}

TEST(VocabularyTest, FingerprintMismatchNamesBoth) {
  EXPECT_TRUE(check_vocab_fingerprint(5, "ckpt/manifest.pb", 5, "vocab.txt").ok());
  const Status s = check_vocab_fingerprint(0x1234, "ckpt/manifest.pb", 0xabcd, "run/vocab.txt");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "ckpt/manifest.pb")) << s.message();
  EXPECT_TRUE(contains(s.message(), "run/vocab.txt")) << s.message();
  EXPECT_TRUE(contains(s.message(), "0x0000000000001234")) << s.message();
  EXPECT_TRUE(contains(s.message(), "0x000000000000abcd")) << s.message();
}

TEST(VocabularyTest, SaveLoadRoundTrip) {
  TempDir dir;
  const Vocabulary v = build({});
  const std::string path = dir.file("vocab.txt");
  ASSERT_TRUE(v.save(path).ok());
  const std::string bytes = testing::read_file(path);
  EXPECT_EQ(bytes.rfind("#moe-vocab version=1 size=10 ", 0), 0u) << bytes;
  EXPECT_TRUE(contains(bytes, "\nthe\t4\n"));
  StatusOr<Vocabulary> loaded = Vocabulary::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->tokens(), v.tokens());
  for (int32_t i = 0; i < v.size(); ++i) EXPECT_EQ(loaded->count(i), v.count(i));
  EXPECT_EQ(loaded->fingerprint(), v.fingerprint());
  EXPECT_EQ(loaded->id("zebra"), 9);
  // No temporary files left behind.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(VocabularyTest, LoadErrors) {
  TempDir dir;
  const Vocabulary v = build({});
  const std::string good_path = dir.file("good.txt");
  ASSERT_TRUE(v.save(good_path).ok());
  const std::string good = testing::read_file(good_path);
  const size_t body = good.find('\n') + 1;

  const auto expect = [&](const std::string& name, const std::string& bytes, StatusCode code) {
    const std::string path = dir.file(name);
    testing::write_file(path, bytes);
    StatusOr<Vocabulary> r = Vocabulary::load(path);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), code) << name << ": " << r.status().to_string();
    EXPECT_TRUE(contains(r.status().message(), path)) << r.status().message();
  };
  std::string flipped = good;
  flipped[body + 12] = static_cast<char>(flipped[body + 12] ^ 0x01);
  expect("corrupt.txt", flipped, StatusCode::kDataLoss);
  expect("truncated.txt", good.substr(0, good.size() - 9), StatusCode::kDataLoss);
  std::string v2 = good;
  v2.replace(v2.find("version=1"), 9, "version=2");
  expect("version.txt", v2, StatusCode::kFailedPrecondition);
  expect("garbage.txt", "hello world\n", StatusCode::kInvalidArgument);
  expect("empty.txt", "", StatusCode::kInvalidArgument);

  const std::string missing = dir.file("missing.txt");
  StatusOr<Vocabulary> r = Vocabulary::load(missing);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(r.status().message(), missing));
}

}  // namespace
}  // namespace moe::data
