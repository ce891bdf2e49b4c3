// Reading word-level text corpora (WikiText style): a UTF-8 text file, plain or gzip-compressed,
// is split on ASCII whitespace into word tokens, and `<eos>` is appended at the end of every
// non-empty line (a line with at least one token; blank or whitespace-only lines add nothing).
//
//   "the cat\n\n sat .\n"  ->  the cat <eos> sat . <eos>
//
// A last line without a trailing newline still ends with `<eos>`. Lines end at '\n' ('\r' is
// whitespace, so CRLF files read the same as LF files). A leading UTF-8 byte-order mark is dropped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace moe::data {

inline constexpr std::string_view kEosToken = "<eos>";

inline bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// The decompressed contents of `path`, checked to be non-empty, valid UTF-8 and to hold at least
// one token. Gzip and zstd are detected from the content (text_stream.h); a name ending in ".gz"
// or ".zst" must hold that format. Errors, each naming the path:
//   kNotFound         the file does not exist
//   kInvalidArgument  empty, no tokens, invalid UTF-8 (with line, byte offset and the bytes),
//                     or not a regular file
//   kDataLoss         truncated or corrupted gzip/zstd data, or a ".gz"/".zst" file that is not
//   kFailedPrecondition  a zstd file in a build without zstd
//   kInternal         the file exists but cannot be opened or read
StatusOr<std::string> read_text_file(const std::string& path);

// Strict UTF-8 (RFC 3629): rejects stray continuation bytes, truncated sequences, overlong forms,
// surrogates (U+D800..U+DFFF) and code points above U+10FFFF. The error (kInvalidArgument) names
// `source`, the 1-based line, the 0-based byte offset into `text` and the offending bytes.
Status validate_utf8(std::string_view text, const std::string& source);
// The same for a chunk of a file that starts at 1-based line `first_line` and byte `base_offset`
// (text_stream.h): the error names the file's line and offset. A chunk must start at a line start.
Status validate_utf8(std::string_view text, const std::string& source, int64_t first_line,
                     int64_t base_offset);

// Calls on_token(std::string_view) for every token of `text` in order, including kEosToken at
// the end of every non-empty line. Returns the number of tokens visited.
template <typename OnToken>
int64_t for_each_token(std::string_view text, OnToken&& on_token) {
  int64_t count = 0;
  bool line_has_token = false;
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const char c = text[i];
    if (c == '\n') {
      if (line_has_token) {
        on_token(kEosToken);
        ++count;
      }
      line_has_token = false;
      ++i;
    } else if (is_ascii_space(c)) {
      ++i;
    } else {
      const size_t begin = i;
      while (i < n && !is_ascii_space(text[i])) ++i;
      on_token(text.substr(begin, i - begin));
      ++count;
      line_has_token = true;
    }
  }
  if (line_has_token) {
    on_token(kEosToken);
    ++count;
  }
  return count;
}

// Word and line counts of a text: words exclude `<eos>`; lines are the non-empty lines (= the
// number of `<eos>` tokens). words + lines is the token count.
struct TextCounts {
  int64_t words = 0;
  int64_t lines = 0;
};
TextCounts count_text(std::string_view text);

// What a tokenized text held, for perplexity per word and bits per byte (comparable across
// tokenizers). words counts WikiText's word-level tokens: the whitespace-separated words plus one
// end of line per non-empty line (the papers' per-word perplexity predicts <eos> as a word), so
// for the word tokenizer words == tokens. bytes: the UTF-8 bytes of the text (decompressed, without
// a byte-order mark). unknown: tokens that are <unk>.
struct TextStats {
  int64_t words = 0;
  int64_t bytes = 0;
  int64_t unknown = 0;
  TextStats& operator+=(const TextStats& o) {
    words += o.words;
    bytes += o.bytes;
    unknown += o.unknown;
    return *this;
  }
};

// read_text_file + for_each_token, materialised (for tests and small files).
StatusOr<std::vector<std::string>> read_tokens(const std::string& path);

}  // namespace moe::data
