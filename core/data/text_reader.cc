#include "core/data/text_reader.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/check.h"
#include "core/data/text_stream.h"

namespace moe::data {
namespace {

// Up to 4 bytes from `text` at `offset`, as "0xE2 0x28".
std::string show_bytes(std::string_view text, size_t offset) {
  std::string out;
  for (size_t i = offset; i < text.size() && i < offset + 4; ++i) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "%s0x%02X", out.empty() ? "" : " ",
                  static_cast<unsigned>(static_cast<unsigned char>(text[i])));
    out += buf;
  }
  return out;
}

// Length of the valid UTF-8 sequence starting at text[i], or 0 if it is invalid.
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  const size_t left = text.size() - i;
  const auto cont = [&](size_t k) { return k < left && (byte(i + k) & 0xC0) == 0x80; };
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;  // 0xC0, 0xC1 are overlong
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    const unsigned char b1 = byte(i + 1);
    if (b0 == 0xE0 && b1 < 0xA0) return 0;  // overlong
    if (b0 == 0xED && b1 > 0x9F) return 0;  // surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const unsigned char b1 = byte(i + 1);
    if (b0 == 0xF0 && b1 < 0x90) return 0;  // overlong
    if (b0 == 0xF4 && b1 > 0x8F) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;  // continuation byte, 0xC0/0xC1, 0xF5..0xFF
}

}  // namespace

Status validate_utf8(std::string_view text, const std::string& source) {
  return validate_utf8(text, source, 1, 0);
}

Status validate_utf8(std::string_view text, const std::string& source, int64_t first_line,
                     int64_t base_offset) {
  int64_t line = first_line;
  size_t line_start = 0;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const unsigned char b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      if (b == '\n') {
        ++line;
        line_start = i + 1;
      }
      ++i;
      continue;
    }
    const size_t len = utf8_sequence_length(text, i);
    if (len == 0) {
      return invalid_argument_error("invalid UTF-8 in ", source, " at line ", line,
                                    ", byte offset ", base_offset + static_cast<int64_t>(i),
                                    " (column byte ", i - line_start + 1, "): bytes ",
                                    show_bytes(text, i));
    }
    i += len;
  }
  return Status::OK();
}

TextCounts count_text(std::string_view text) {
  TextCounts counts;
  for_each_token(text, [&](std::string_view token) {
    // Only the reader's own end-of-line marker is a line: compare by address, not by content, so
    // a literal "<eos>" word in the text counts as a word.
    if (token.data() == kEosToken.data()) {
      ++counts.lines;
    } else {
      ++counts.words;
    }
  });
  return counts;
}

StatusOr<std::string> read_text_file(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string text, read_decompressed(path));
  if (text.empty()) return invalid_argument_error("text file ", path, " is empty");
  MOE_RETURN_IF_ERROR(validate_utf8(text, path));
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);
  bool any = false;
  for (char c : text) {
    if (!is_ascii_space(c)) {
      any = true;
      break;
    }
  }
  if (!any) {
    return invalid_argument_error("text file ", path, " has no tokens (", text.size(),
                                  " bytes, all whitespace)");
  }
  return text;
}

StatusOr<std::vector<std::string>> read_tokens(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  std::vector<std::string> tokens;
  for_each_token(text, [&](std::string_view token) { tokens.emplace_back(token); });
  return tokens;
}

}  // namespace moe::data
