#include "core/data/text_reader.h"

#include <gtest/gtest.h>

#include "tests/data/data_test_util.h"

namespace moe::data {
namespace {

using testing::contains;
using testing::TempDir;
using testing::write_file;
using testing::write_gzip;
using Tokens = std::vector<std::string>;

Tokens tokenize(std::string_view text) {
  Tokens out;
  for_each_token(text, [&](std::string_view t) { out.emplace_back(t); });
  return out;
}

TEST(TextReaderTest, EosAtEndOfEveryNonEmptyLine) {
  EXPECT_EQ(tokenize("the cat\n\n sat .\n"), (Tokens{"the", "cat", "<eos>", "sat", ".", "<eos>"}));
  // No final newline; whitespace-only lines; tabs, CR, vertical tab, form feed.
  EXPECT_EQ(tokenize("a\tb\r\n   \n\x0b\x0c\nc  d"),
            (Tokens{"a", "b", "<eos>", "c", "d", "<eos>"}));
  EXPECT_EQ(tokenize("\n\n"), Tokens{});
  EXPECT_EQ(tokenize(""), Tokens{});
  // Non-ASCII bytes are never separators (U+00A0 no-break space stays inside the token).
  EXPECT_EQ(tokenize("caf\xC3\xA9 x\xC2\xA0y\n"), (Tokens{"caf\xC3\xA9", "x\xC2\xA0y", "<eos>"}));
}

TEST(TextReaderTest, CountText) {
  // 3 non-empty lines, 7 words; a literal <eos> word counts as a word.
  const TextCounts c = count_text("one two\n\nthree four five\n  six <eos>");
  EXPECT_EQ(c.words, 7);
  EXPECT_EQ(c.lines, 3);
}

TEST(TextReaderTest, PlainAndGzipReadTheSame) {
  TempDir dir;
  const std::string text = "Hello world .\nSecond line\n\n\xE2\x82\xAC 5\n";
  write_file(dir.file("a.txt"), text);
  write_gzip(dir.file("a.txt.gz"), text);
  // Also gzip content under a name without .gz: detected by content.
  write_gzip(dir.file("b.txt"), text);
  const Tokens want = {"Hello", "world",        ".", "<eos>", "Second", "line",
                       "<eos>", "\xE2\x82\xAC", "5", "<eos>"};
  for (const char* name : {"a.txt", "a.txt.gz", "b.txt"}) {
    StatusOr<Tokens> tokens = read_tokens(dir.file(name));
    ASSERT_TRUE(tokens.ok()) << name << ": " << tokens.status().to_string();
    EXPECT_EQ(*tokens, want) << name;
  }
  StatusOr<std::string> raw = read_text_file(dir.file("a.txt.gz"));
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(*raw, text);
}

TEST(TextReaderTest, LargeGzipMultipleChunks) {
  TempDir dir;
  // ~3 MB of text: more than one 1 MiB read chunk.
  std::string text;
  int64_t words = 0, lines = 0;
  for (int i = 0; i < 200000; ++i) {
    const int n = i % 7;  // lines with 0..6 words
    for (int w = 0; w < n; ++w) text += "w" + std::to_string((i * 31 + w) % 1000) + " ";
    text += "\n";
    words += n;
    lines += n > 0 ? 1 : 0;
  }
  write_gzip(dir.file("big.txt.gz"), text);
  StatusOr<std::string> read = read_text_file(dir.file("big.txt.gz"));
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  EXPECT_EQ(read->size(), text.size());
  const TextCounts c = count_text(*read);
  EXPECT_EQ(c.words, words);
  EXPECT_EQ(c.lines, lines);
}

TEST(TextReaderTest, ByteOrderMarkIsDropped) {
  TempDir dir;
  write_file(dir.file("bom.txt"), "\xEF\xBB\xBFword\n");
  StatusOr<Tokens> tokens = read_tokens(dir.file("bom.txt"));
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(*tokens, (Tokens{"word", "<eos>"}));
}

TEST(TextReaderTest, MissingFileIsNotFound) {
  TempDir dir;
  const std::string path = dir.file("nope.txt");
  StatusOr<std::string> r = read_text_file(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(r.status().message(), path)) << r.status().message();
}

TEST(TextReaderTest, EmptyOrTokenlessFilesAreInvalid) {
  TempDir dir;
  write_file(dir.file("empty.txt"), "");
  write_gzip(dir.file("empty.txt.gz"), "");
  write_file(dir.file("blank.txt"), " \n\t\r\n\n");
  write_gzip(dir.file("blank.txt.gz"), "\n\n\n");
  for (const char* name : {"empty.txt", "empty.txt.gz", "blank.txt", "blank.txt.gz"}) {
    StatusOr<std::string> r = read_text_file(dir.file(name));
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_TRUE(contains(r.status().message(), dir.file(name))) << r.status().message();
  }
  EXPECT_TRUE(contains(read_text_file(dir.file("blank.txt")).status().message(), "no tokens"));
  EXPECT_TRUE(contains(read_text_file(dir.file("empty.txt")).status().message(), "empty"));
}

TEST(TextReaderTest, DirectoryIsInvalid) {
  TempDir dir;
  StatusOr<std::string> r = read_text_file(dir.path().string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

struct BadUtf8Case {
  const char* what;
  std::string bad;  // the invalid bytes
};

TEST(TextReaderTest, InvalidUtf8NamesFileLineAndOffset) {
  const BadUtf8Case cases[] = {
      {"stray continuation", "\x80"},          {"overlong 2-byte", "\xC0\xAF"},
      {"overlong 3-byte", "\xE0\x80\xAF"},     {"overlong 4-byte", "\xF0\x80\x80\xAF"},
      {"surrogate", "\xED\xA0\x80"},           {"above U+10FFFF", "\xF4\x90\x80\x80"},
      {"invalid lead F5", "\xF5\x80\x80\x80"}, {"invalid byte FF", "\xFF"},
      {"truncated 3-byte", "\xE2\x82 "},       {"lead then ASCII", "\xC3("},
  };
  TempDir dir;
  for (bool gz : {false, true}) {
    for (const BadUtf8Case& c : cases) {
      // Two good lines (with valid multi-byte characters), then "ab " and the bad bytes.
      const std::string line1 = "caf\xC3\xA9 ok\n";      // 9 bytes
      const std::string line2 = "\xF0\x9F\x98\x80 x\n";  // 7 bytes
      const std::string text = line1 + line2 + "ab " + c.bad + " tail\n";
      const size_t offset = line1.size() + line2.size() + 3;  // = 19
      const std::string path = dir.file(gz ? "bad.txt.gz" : "bad.txt");
      if (gz) {
        write_gzip(path, text);
      } else {
        write_file(path, text);
      }
      StatusOr<std::string> r = read_text_file(path);
      ASSERT_FALSE(r.ok()) << c.what;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
      const std::string& msg = r.status().message();
      EXPECT_TRUE(contains(msg, path)) << msg;
      EXPECT_TRUE(contains(msg, "line 3")) << c.what << ": " << msg;
      EXPECT_TRUE(contains(msg, "byte offset " + std::to_string(offset))) << c.what << ": " << msg;
    }
  }
}

TEST(TextReaderTest, ValidUtf8EdgesAccepted) {
  // U+007F, U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFF, U+10000, U+10FFFF.
  const std::string text =
      "\x7F \xC2\x80 \xDF\xBF \xE0\xA0\x80 \xED\x9F\xBF \xEE\x80\x80 \xEF\xBF\xBF "
      "\xF0\x90\x80\x80 \xF4\x8F\xBF\xBF\n";
  EXPECT_TRUE(validate_utf8(text, "edges").ok()) << validate_utf8(text, "edges").to_string();
}

std::string sample_text() {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + " of the sample text .\n";
  return text;
}

TEST(TextReaderTest, TruncatedGzipIsDataLoss) {
  TempDir dir;
  write_gzip(dir.file("full.txt.gz"), sample_text());
  const std::string gz = testing::read_file(dir.file("full.txt.gz"));
  ASSERT_GT(gz.size(), 100u);
  // Cut inside the deflate stream, inside the 8-byte trailer, and just the last byte.
  for (size_t keep : {gz.size() / 2, gz.size() - 6, gz.size() - 1, size_t{15}}) {
    const std::string path = dir.file("cut.txt.gz");
    write_file(path, gz.substr(0, keep));
    StatusOr<std::string> r = read_text_file(path);
    ASSERT_FALSE(r.ok()) << "kept " << keep << " of " << gz.size();
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
    EXPECT_TRUE(contains(r.status().message(), path)) << r.status().message();
    EXPECT_TRUE(contains(r.status().message(), "truncated")) << r.status().message();
  }
}

TEST(TextReaderTest, CorruptedGzipIsDataLoss) {
  TempDir dir;
  write_gzip(dir.file("full.txt.gz"), sample_text());
  const std::string gz = testing::read_file(dir.file("full.txt.gz"));
  int failures = 0;
  // Flip a byte in the stored CRC32 (trailer) and at a few places in the compressed data.
  for (size_t pos : {gz.size() - 8, gz.size() / 2, gz.size() / 3, size_t{40}}) {
    std::string bad = gz;
    bad[pos] = static_cast<char>(bad[pos] ^ 0x5A);
    const std::string path = dir.file("bad.txt.gz");
    write_file(path, bad);
    StatusOr<std::string> r = read_text_file(path);
    ASSERT_FALSE(r.ok()) << "flipped byte " << pos;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().to_string();
    EXPECT_TRUE(contains(r.status().message(), path));
    ++failures;
  }
  EXPECT_EQ(failures, 4);
}

TEST(TextReaderTest, GzNameWithPlainContentIsDataLoss) {
  TempDir dir;
  write_file(dir.file("plain.txt.gz"), "not compressed\n");
  StatusOr<std::string> r = read_text_file(dir.file("plain.txt.gz"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(contains(r.status().message(), dir.file("plain.txt.gz")));
}

}  // namespace
}  // namespace moe::data
