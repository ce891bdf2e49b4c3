#include "core/data/token_cache.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>

#include "base/hash.h"
#include "io/file_util.h"
#include "tests/data/data_test_util.h"

namespace moe::data {
namespace {

using testing::contains;
using testing::TempDir;

Vocabulary small_vocab(const char* text = "a b c d e\nf g\n") {
  StatusOr<Vocabulary> v = Vocabulary::build_from_text(text, {});
  EXPECT_TRUE(v.ok());
  return std::move(v).value();
}

std::vector<int32_t> sample_ids(const Vocabulary& vocab, int n) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (i * 7 + 3) % vocab.size();
  return ids;
}

template <typename T>
T read_le(const std::string& bytes, size_t offset) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<T>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  }
  return v;
}

TEST(TokenCacheTest, RoundTripAndLayout) {
  TempDir dir;
  const Vocabulary vocab = small_vocab();
  const std::vector<int32_t> ids = sample_ids(vocab, 1001);
  const std::string path = dir.file("train.tok");
  TextStats stats;
  stats.words = 900;
  stats.bytes = 5123;
  stats.unknown = 17;
  ASSERT_TRUE(write_token_cache(path, ids, vocab.fingerprint(), stats).ok());

  const std::string bytes = testing::read_file(path);
  ASSERT_EQ(bytes.size(), 64u + 4u * ids.size());
  EXPECT_EQ(bytes.substr(0, 8), "MOETOK01");
  EXPECT_EQ(read_le<uint32_t>(bytes, 8), 2u);
  EXPECT_EQ(read_le<uint32_t>(bytes, 12), 64u);
  EXPECT_EQ(read_le<uint64_t>(bytes, 16), vocab.fingerprint());
  EXPECT_EQ(read_le<uint64_t>(bytes, 24), ids.size());
  EXPECT_EQ(read_le<uint64_t>(bytes, 32), 900u);
  EXPECT_EQ(read_le<uint64_t>(bytes, 40), 5123u);
  EXPECT_EQ(read_le<uint64_t>(bytes, 48), 17u);
  const uLong payload_crc =
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data() + 64),
            static_cast<uInt>(bytes.size() - 64));
  EXPECT_EQ(read_le<uint32_t>(bytes, 56), static_cast<uint32_t>(payload_crc));
  const uLong header_crc =
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), 60);
  EXPECT_EQ(read_le<uint32_t>(bytes, 60), static_cast<uint32_t>(header_crc));
  EXPECT_EQ(read_le<int32_t>(bytes, 64 + 4 * 5), ids[5]);

  TextStats read_stats;
  StatusOr<std::vector<int32_t>> loaded = load_token_cache(path, vocab, "vocab.txt", &read_stats);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(*loaded, ids);
  EXPECT_EQ(read_stats.words, 900);
  EXPECT_EQ(read_stats.bytes, 5123);
  EXPECT_EQ(read_stats.unknown, 17);

  // The write went through a temporary name that is gone now.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(TokenCacheTest, EmptyPayloadRoundTrips) {
  TempDir dir;
  const Vocabulary vocab = small_vocab();
  ASSERT_TRUE(write_token_cache(dir.file("e.tok"), {}, vocab.fingerprint(), {}).ok());
  StatusOr<std::vector<int32_t>> loaded = load_token_cache(dir.file("e.tok"), vocab, "v");
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(loaded->empty());
}

class TokenCacheErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ids_ = sample_ids(vocab_, 500);
    ASSERT_TRUE(write_token_cache(dir_.file("good.tok"), ids_, vocab_.fingerprint(), {}).ok());
    good_ = testing::read_file(dir_.file("good.tok"));
  }
  // Writes `bytes` and loads them; returns the status.
  Status load(const std::string& bytes, const Vocabulary& vocab, std::string* path_out) {
    *path_out = dir_.file("bad.tok");
    testing::write_file(*path_out, bytes);
    return load_token_cache(*path_out, vocab, "the-vocab-file").status();
  }

  TempDir dir_;
  Vocabulary vocab_ = small_vocab();
  std::vector<int32_t> ids_;
  std::string good_;
};

TEST_F(TokenCacheErrorTest, TruncatedNamesExpectedAndActualSize) {
  std::string path;
  const Status s = load(good_.substr(0, good_.size() - 6), vocab_, &path);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s.message(), path)) << s.message();
  EXPECT_TRUE(contains(s.message(), std::to_string(good_.size()))) << s.message();
  EXPECT_TRUE(contains(s.message(), std::to_string(good_.size() - 6))) << s.message();
  // Truncated inside the header.
  const Status h = load(good_.substr(0, 20), vocab_, &path);
  EXPECT_EQ(h.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(h.message(), "20")) << h.message();
  // Longer than the header says.
  EXPECT_EQ(load(good_ + "xxxx", vocab_, &path).code(), StatusCode::kDataLoss);
}

TEST_F(TokenCacheErrorTest, CorruptedPayloadOrHeader) {
  std::string path;
  std::string bad = good_;
  bad[64 + 123] = static_cast<char>(bad[64 + 123] ^ 0x10);
  Status s = load(bad, vocab_, &path);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s.message(), path));
  EXPECT_TRUE(contains(s.message(), "corrupted")) << s.message();

  bad = good_;
  bad[17] = static_cast<char>(bad[17] ^ 0x01);  // inside the fingerprint field
  s = load(bad, vocab_, &path);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();

  bad = good_;
  bad[0] = 'X';
  s = load(bad, vocab_, &path);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(s.message(), "MOETOK01")) << s.message();

  EXPECT_EQ(load("", vocab_, &path).code(), StatusCode::kDataLoss);
}

TEST_F(TokenCacheErrorTest, VersionOneIsAnotherVersion) {
  // A cache written by the previous format (40-byte header, version 1): refused by version, so the
  // run's corpus cache rebuilds instead of reading it as damaged.
  std::string old = good_.substr(0, 40) + good_.substr(64);
  old[8] = 1;
  std::string path;
  const Status s = load(old, vocab_, &path);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "format version 1")) << s.message();
}

TEST_F(TokenCacheErrorTest, FingerprintMismatchNamesBoth) {
  const Vocabulary other = small_vocab("a b c d e\nf h\n");
  ASSERT_NE(other.fingerprint(), vocab_.fingerprint());
  std::string path;
  const Status s = load(good_, other, &path);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), path)) << s.message();
  EXPECT_TRUE(contains(s.message(), "the-vocab-file")) << s.message();
  EXPECT_TRUE(contains(s.message(), io::hex64(vocab_.fingerprint()))) << s.message();
  EXPECT_TRUE(contains(s.message(), io::hex64(other.fingerprint()))) << s.message();
}

TEST_F(TokenCacheErrorTest, MissingFileIsNotFound) {
  const std::string path = dir_.file("missing.tok");
  const Status s = load_token_cache(path, vocab_, "v").status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(s.message(), path));
}

}  // namespace
}  // namespace moe::data
