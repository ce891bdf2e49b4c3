#include "core/data/vocabulary.h"

#include <algorithm>
#include <cstdlib>

#include "base/check.h"
#include "base/hash.h"
#include "core/data/text_reader.h"
#include "io/file_util.h"

namespace moe::data {
namespace {

constexpr std::string_view kHeaderTag = "#moe-vocab";

bool has_ascii_space(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return is_ascii_space(c); });
}

// Parses a decimal or 0x-prefixed hexadecimal unsigned integer filling the whole string.
bool parse_u64(std::string_view s, uint64_t* out) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  if (s.empty() || s.size() > 20) return false;
  uint64_t value = 0;
  for (char c : s) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (base == 16 && c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return false;
    }
    const uint64_t next = value * static_cast<uint64_t>(base) + static_cast<uint64_t>(digit);
    if (next / static_cast<uint64_t>(base) != value) return false;  // overflow
    value = next;
  }
  *out = value;
  return true;
}

}  // namespace

void TokenCounter::add(std::string_view token) {
  scratch_.assign(token.data(), token.size());
  ++counts_[scratch_];
  ++total_;
}

void TokenCounter::merge(const TokenCounter& other) {
  for (const auto& [token, count] : other.counts_) counts_[token] += count;
  total_ += other.total_;
}

uint64_t vocab_fingerprint(const std::vector<std::string>& tokens) {
  uint64_t hash = kFnv1a64Offset;
  for (const std::string& token : tokens) {
    uint64_t len = token.size();
    unsigned char le[8];
    for (int b = 0; b < 8; ++b) le[b] = static_cast<unsigned char>(len >> (8 * b));
    hash = fnv1a64_update(hash, le, sizeof(le));
    hash = fnv1a64_update(hash, token.data(), token.size());
  }
  return hash;
}

Status check_vocab_fingerprint(uint64_t expected, const std::string& expected_source,
                               uint64_t actual, const std::string& actual_source) {
  if (expected == actual) return Status::OK();
  return failed_precondition_error("vocabulary mismatch: ", expected_source,
                                   " was built with vocabulary fingerprint ", io::hex64(expected),
                                   ", but ", actual_source, " has fingerprint ", io::hex64(actual));
}

Vocabulary::Vocabulary()
    : Vocabulary({std::string(kUnk), std::string(kEos), std::string(kAttack)}, {0, 0, 0}) {}

Vocabulary::Vocabulary(std::vector<std::string> tokens, std::vector<int64_t> counts)
    : tokens_(std::move(tokens)), counts_(std::move(counts)) {
  index();
}

Vocabulary::Vocabulary(const Vocabulary& other) : tokens_(other.tokens_), counts_(other.counts_) {
  index();
}

Vocabulary& Vocabulary::operator=(const Vocabulary& other) {
  if (this != &other) {
    tokens_ = other.tokens_;
    counts_ = other.counts_;
    index();
  }
  return *this;
}

void Vocabulary::index() {
  MOE_CHECK(tokens_.size() == counts_.size(), "vocabulary: ", tokens_.size(), " tokens, ",
            counts_.size(), " counts");
  MOE_CHECK(tokens_.size() <= static_cast<size_t>(INT32_MAX), "vocabulary too large");
  ids_.clear();
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const bool inserted =
        ids_.emplace(std::string_view(tokens_[i]), static_cast<int32_t>(i)).second;
    MOE_CHECK(inserted, "vocabulary: duplicate token '", tokens_[i], "'");
  }
  fingerprint_ = vocab_fingerprint(tokens_);
}

StatusOr<Vocabulary> Vocabulary::build(const TokenCounter& counter, const VocabOptions& options) {
  if (options.min_count < 1) {
    return invalid_argument_error("vocabulary min_count = ", options.min_count, " must be >= 1");
  }
  if (options.max_size != 0 && options.max_size < kNumSpecial) {
    return invalid_argument_error("vocabulary max_size = ", options.max_size,
                                  " must be 0 (no cap) or >= ", kNumSpecial,
                                  " (the special tokens <unk>, <eos>, AAA)");
  }
  const auto& counts = counter.counts();
  const auto count_of = [&](std::string_view token) -> int64_t {
    auto it = counts.find(std::string(token));
    return it == counts.end() ? 0 : it->second;
  };

  std::vector<std::pair<const std::string*, int64_t>> words;
  words.reserve(counts.size());
  int64_t unk_count = count_of(kUnk);
  for (const auto& [token, count] : counts) {
    if (token == kUnk || token == kEos || token == kAttack) continue;
    if (count >= options.min_count) {
      words.emplace_back(&token, count);
    } else {
      unk_count += count;
    }
  }
  std::sort(words.begin(), words.end(), [](const auto& a, const auto& b) {
    if (a.second != b.second) return a.second > b.second;
    return *a.first < *b.first;  // char_traits<char> compares as unsigned char: byte order
  });
  if (options.max_size != 0 &&
      static_cast<int64_t>(words.size()) > options.max_size - kNumSpecial) {
    const size_t keep = static_cast<size_t>(options.max_size - kNumSpecial);
    for (size_t i = keep; i < words.size(); ++i) unk_count += words[i].second;
    words.resize(keep);
  }

  std::vector<std::string> tokens = {std::string(kUnk), std::string(kEos), std::string(kAttack)};
  std::vector<int64_t> token_counts = {unk_count, count_of(kEos), count_of(kAttack)};
  tokens.reserve(words.size() + kNumSpecial);
  token_counts.reserve(words.size() + kNumSpecial);
  for (const auto& [token, count] : words) {
    tokens.push_back(*token);
    token_counts.push_back(count);
  }
  return Vocabulary(std::move(tokens), std::move(token_counts));
}

StatusOr<Vocabulary> Vocabulary::build_from_text(std::string_view text,
                                                 const VocabOptions& options) {
  TokenCounter counter;
  for_each_token(text, [&](std::string_view token) { counter.add(token); });
  return build(counter, options);
}

Status Vocabulary::save(const std::string& path) const {
  std::string body;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    body += tokens_[i];
    body += '\t';
    body += std::to_string(counts_[i]);
    body += '\n';
  }
  const std::string header =
      str_cat(kHeaderTag, " version=", kFormatVersion, " size=", tokens_.size(),
              " fingerprint=", io::hex64(fingerprint_),
              " crc32=", io::hex32(io::crc32_of(body.data(), body.size())), "\n");
  return io::write_file_atomic(path, {header, body});
}

namespace {

// The fields of a vocabulary file's first line: "<tag> version=V size=N fingerprint=F crc32=C".
struct VocabHeader {
  uint64_t version = 0, size = 0, fingerprint = 0, crc = 0;
};

StatusOr<VocabHeader> parse_vocab_header(std::string_view header, const std::string& path) {
  VocabHeader h;
  bool has_version = false, has_size = false, has_fingerprint = false, has_crc = false;
  std::string_view rest = header.substr(kHeaderTag.size());
  while (!rest.empty()) {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    const size_t end = std::min(rest.find(' '), rest.size());
    const std::string_view field = rest.substr(0, end);
    rest.remove_prefix(end);
    if (field.empty()) continue;
    const size_t eq = field.find('=');
    const std::string_view key = field.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : field.substr(eq + 1);
    uint64_t parsed = 0;
    if (!parse_u64(value, &parsed)) {
      return invalid_argument_error("vocabulary file ", path, ": bad header field '", field, "'");
    }
    if (key == "version") {
      h.version = parsed, has_version = true;
    } else if (key == "size") {
      h.size = parsed, has_size = true;
    } else if (key == "fingerprint") {
      h.fingerprint = parsed, has_fingerprint = true;
    } else if (key == "crc32") {
      h.crc = parsed, has_crc = true;
    }
  }
  if (!has_version || !has_size || !has_fingerprint || !has_crc) {
    return invalid_argument_error("vocabulary file ", path,
                                  ": header needs version, size, fingerprint and crc32, got '",
                                  header, "'");
  }
  if (h.version != static_cast<uint64_t>(Vocabulary::kFormatVersion)) {
    return failed_precondition_error("vocabulary file ", path, " has format version ", h.version,
                                     "; this build reads version ", Vocabulary::kFormatVersion);
  }
  return h;
}

// The "<token>\t<count>" lines after the header (line numbers count the header as line 1).
Status parse_vocab_body(std::string_view body, const std::string& path,
                        std::vector<std::string>* tokens, std::vector<int64_t>* counts) {
  size_t pos = 0;
  int64_t line_no = 1;
  while (pos < body.size()) {
    ++line_no;
    const size_t nl = body.find('\n', pos);
    if (nl == std::string_view::npos) {
      return data_loss_error("vocabulary file ", path, " is truncated at line ", line_no,
                             " (no final newline)");
    }
    const std::string_view line = body.substr(pos, nl - pos);
    pos = nl + 1;
    const size_t tab = line.rfind('\t');
    uint64_t count = 0;
    if (tab == std::string_view::npos || tab == 0 || !parse_u64(line.substr(tab + 1), &count) ||
        count > static_cast<uint64_t>(INT64_MAX)) {
      return invalid_argument_error("vocabulary file ", path, " line ", line_no,
                                    ": expected '<token>\\t<count>', got '", line, "'");
    }
    const std::string_view token = line.substr(0, tab);
    if (has_ascii_space(token)) {
      return invalid_argument_error("vocabulary file ", path, " line ", line_no, ": token '", token,
                                    "' contains whitespace");
    }
    tokens->emplace_back(token);
    counts->push_back(static_cast<int64_t>(count));
  }
  return Status::OK();
}

// The special tokens first, in order, and no token twice.
Status check_vocab_tokens(const std::vector<std::string>& tokens, const std::string& path) {
  const std::string_view specials[Vocabulary::kNumSpecial] = {Vocabulary::kUnk, Vocabulary::kEos,
                                                              Vocabulary::kAttack};
  for (int32_t i = 0; i < Vocabulary::kNumSpecial; ++i) {
    if (static_cast<int32_t>(tokens.size()) <= i || tokens[i] != specials[i]) {
      return invalid_argument_error("vocabulary file ", path, ": id ", i, " must be '", specials[i],
                                    "'");
    }
  }
  std::unordered_map<std::string_view, int64_t> seen;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto [it, inserted] = seen.emplace(tokens[i], static_cast<int64_t>(i));
    if (!inserted) {
      return invalid_argument_error("vocabulary file ", path, ": token '", tokens[i],
                                    "' appears twice (lines ", it->second + 2, " and ", i + 2, ")");
    }
  }
  return Status::OK();
}

}  // namespace

StatusOr<Vocabulary> Vocabulary::load(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string bytes, io::read_file(path));
  const std::string_view all(bytes);
  const size_t header_end = all.find('\n');
  const std::string_view header = all.substr(0, header_end);
  if (header.substr(0, kHeaderTag.size()) != kHeaderTag ||
      (header.size() > kHeaderTag.size() && header[kHeaderTag.size()] != ' ')) {
    return invalid_argument_error("vocabulary file ", path, " does not start with '", kHeaderTag,
                                  "' (not a momoe vocabulary file)");
  }
  if (header_end == std::string_view::npos) {
    return data_loss_error("vocabulary file ", path, " is truncated: no line after the header");
  }
  MOE_ASSIGN_OR_RETURN(const VocabHeader h, parse_vocab_header(header, path));
  const std::string_view body = all.substr(header_end + 1);
  const uint32_t actual_crc = io::crc32_of(body.data(), body.size());
  if (actual_crc != h.crc) {
    return data_loss_error("vocabulary file ", path, " is corrupted: crc32 of its ", body.size(),
                           " content bytes is ", io::hex32(actual_crc), ", header says ",
                           io::hex32(static_cast<uint32_t>(h.crc)));
  }
  MOE_RETURN_IF_ERROR(validate_utf8(body, path));
  std::vector<std::string> tokens;
  std::vector<int64_t> counts;
  MOE_RETURN_IF_ERROR(parse_vocab_body(body, path, &tokens, &counts));
  if (tokens.size() != h.size) {
    return data_loss_error("vocabulary file ", path, " holds ", tokens.size(),
                           " tokens, header says ", h.size);
  }
  MOE_RETURN_IF_ERROR(check_vocab_tokens(tokens, path));
  const uint64_t actual_fingerprint = vocab_fingerprint(tokens);
  if (actual_fingerprint != h.fingerprint) {
    return data_loss_error("vocabulary file ", path, ": its tokens have fingerprint ",
                           io::hex64(actual_fingerprint), ", header says ",
                           io::hex64(h.fingerprint));
  }
  return Vocabulary(std::move(tokens), std::move(counts));
}

int32_t Vocabulary::id(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? kUnkId : it->second;
}

bool Vocabulary::contains(std::string_view token) const { return ids_.count(token) != 0; }

const std::string& Vocabulary::token(int32_t id) const {
  MOE_CHECK(id >= 0 && id < size(), "vocabulary id ", id, " outside [0, ", size(), ")");
  return tokens_[static_cast<size_t>(id)];
}

int64_t Vocabulary::count(int32_t id) const {
  MOE_CHECK(id >= 0 && id < size(), "vocabulary id ", id, " outside [0, ", size(), ")");
  return counts_[static_cast<size_t>(id)];
}

std::vector<int32_t> Vocabulary::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  for_each_token(text, [&](std::string_view token) { ids.push_back(id(token)); });
  return ids;
}

}  // namespace moe::data
