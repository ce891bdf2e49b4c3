#include "core/data/text_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/base/check.h"

namespace moe::data {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

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

// zlib's messages start with "<path>: "; we name the path ourselves.
std::string without_path(const std::string& msg, const std::string& path) {
  const std::string prefix = path + ": ";
  return msg.compare(0, prefix.size(), prefix) == 0 ? msg.substr(prefix.size()) : msg;
}

// Reads the whole (possibly gzip-compressed) file through zlib.
StatusOr<std::string> read_maybe_gzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    if (err == ENOENT) return not_found_error("text file not found: ", path);
    return internal_error("cannot open text file ", path, ": ",
                          err != 0 ? std::strerror(err) : "out of memory");
  }
  gzbuffer(file, 1u << 18);
  std::string text;
  constexpr unsigned kChunk = 1u << 20;
  for (;;) {
    const size_t old_size = text.size();
    text.resize(old_size + kChunk);
    const int n = gzread(file, text.data() + old_size, kChunk);
    if (n < 0) {
      int errnum = 0;
      const std::string msg = gzerror(file, &errnum);
      gzclose_r(file);
      if (errnum == Z_ERRNO) {
        return internal_error("cannot read text file ", path, ": ", std::strerror(errno));
      }
      return data_loss_error("corrupted gzip data in ", path, ": ", without_path(msg, path));
    }
    text.resize(old_size + static_cast<size_t>(n));
    if (n == 0) break;
  }
  // A stream cut short reads without error up to the cut; zlib records it as Z_BUF_ERROR.
  int errnum = 0;
  const std::string msg = without_path(gzerror(file, &errnum), path);
  const bool direct = gzdirect(file) != 0;
  const int close_status = gzclose_r(file);
  if (errnum == Z_BUF_ERROR || close_status == Z_BUF_ERROR) {
    return data_loss_error("truncated gzip file ", path, " (the compressed stream ends after ",
                           text.size(),
                           " decompressed bytes): ", msg.empty() ? "unexpected end of file" : msg);
  }
  if (errnum != Z_OK || close_status != Z_OK) {
    return data_loss_error("cannot read gzip file ", path, ": ", msg);
  }
  if (direct && ends_with(path, ".gz") && !text.empty()) {
    return data_loss_error("file ", path, " is named .gz but does not hold gzip data");
  }
  return text;
}

}  // namespace

Status validate_utf8(std::string_view text, const std::string& source) {
  int64_t line = 1;
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
                                    ", byte offset ", i, " (column byte ", i - line_start + 1,
                                    "): bytes ", show_bytes(text, i));
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
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return not_found_error("text file not found: ", path);
  if (!std::filesystem::is_regular_file(status)) {
    return invalid_argument_error("text file ", path, " is not a regular file");
  }
  MOE_ASSIGN_OR_RETURN(std::string text, read_maybe_gzip(path));
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
