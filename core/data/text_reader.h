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

#include "core/base/status.h"

namespace moe::data {

inline constexpr std::string_view kEosToken = "<eos>";

inline bool is_ascii_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// The decompressed contents of `path`, checked to be non-empty, valid UTF-8 and to hold at least
// one token. Gzip is detected from the content (zlib's gzopen/gzread read plain files unchanged);
// a name ending in ".gz" must hold gzip data. Errors, each naming the path:
//   kNotFound         the file does not exist
//   kInvalidArgument  empty, no tokens, invalid UTF-8 (with line, byte offset and the bytes),
//                     or not a regular file
//   kDataLoss         truncated or corrupted gzip data, or a ".gz" file that is not gzip
//   kInternal         the file exists but cannot be opened or read
StatusOr<std::string> read_text_file(const std::string& path);

// Strict UTF-8 (RFC 3629): rejects stray continuation bytes, truncated sequences, overlong forms,
// surrogates (U+D800..U+DFFF) and code points above U+10FFFF. The error (kInvalidArgument) names
// `source`, the 1-based line, the 0-based byte offset into `text` and the offending bytes.
Status validate_utf8(std::string_view text, const std::string& source);

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

// read_text_file + for_each_token, materialised (for tests and small files).
StatusOr<std::vector<std::string>> read_tokens(const std::string& path);

}  // namespace moe::data
