// The word vocabulary: token <-> id, built from the training split's tokens.
//
// Ids 0..2 are reserved special tokens, present in every vocabulary whatever the text holds:
//   0 `<unk>`  every word not in the vocabulary maps here
//   1 `<eos>`  the end-of-line token the reader appends (text_reader.h)
//   2 `AAA`    the replacement word of the word-swap attack (attack.h; spec/momentum-smoe.md 6.4).
//              The spec leaves open how 'AAA' is tokenised; we make it one reserved word so that
//              attacked validation/test text never maps to `<unk>` and a model trained on clean
//              text has an (untrained-on, except for literal "AAA" words) embedding row for it.
//              A literal "AAA" in the text is the same token.
// The other words follow in descending training count, ties broken by byte-wise token order, so
// the same text and options always give the same ids.
//
// counts: a word's training count; `<eos>` counts lines; `<unk>` counts the training tokens that
// map to it (words cut by min_count/max_size plus literal "<unk>" words, as in WikiText).
//
// fingerprint() identifies the token list (ids and spellings, not counts). Checkpoints and token
// caches store it to detect a vocabulary mismatch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace moe::data {

struct VocabOptions {
  int64_t max_size = 0;   // total size including the 3 special tokens; 0 = no cap, else >= 3
  int64_t min_count = 1;  // words seen fewer times in train map to `<unk>`; >= 1
};

// Word counts of a token stream (any order of add() calls gives the same counts).
class TokenCounter {
 public:
  void add(std::string_view token);
  // Adds every count of `other` (counting a text in chunks gives the counts of the whole).
  void merge(const TokenCounter& other);
  const std::unordered_map<std::string, int64_t>& counts() const { return counts_; }
  int64_t total() const { return total_; }

 private:
  std::unordered_map<std::string, int64_t> counts_;
  std::string scratch_;
  int64_t total_ = 0;
};

class Vocabulary {
 public:
  static constexpr int32_t kUnkId = 0;
  static constexpr int32_t kEosId = 1;
  static constexpr int32_t kAttackId = 2;
  static constexpr int32_t kNumSpecial = 3;
  static constexpr std::string_view kUnk = "<unk>";
  static constexpr std::string_view kEos = "<eos>";
  static constexpr std::string_view kAttack = "AAA";
  static constexpr int kFormatVersion = 1;

  // Only the special tokens, with zero counts.
  Vocabulary();
  Vocabulary(const Vocabulary& other);
  Vocabulary& operator=(const Vocabulary& other);
  Vocabulary(Vocabulary&&) noexcept = default;  // element addresses survive a vector move
  Vocabulary& operator=(Vocabulary&&) noexcept = default;

  // From training counts. Errors: kInvalidArgument for options out of range.
  static StatusOr<Vocabulary> build(const TokenCounter& counter, const VocabOptions& options);
  // From a text's tokens (text_reader.h for_each_token).
  static StatusOr<Vocabulary> build_from_text(std::string_view text, const VocabOptions& options);

  // Text format, version 1 (UTF-8, '\n' line ends):
  //   #moe-vocab version=1 size=<N> fingerprint=0x<16 hex> crc32=0x<8 hex>
  //   <token>\t<count>          (N lines, in id order)
  // crc32 covers every byte after the header line. Written atomically (io/file_util.h).
  Status save(const std::string& path) const;
  // Errors naming the path: kNotFound; kInvalidArgument (not a vocabulary file, or malformed
  // content: missing/misplaced special tokens, duplicates, bad counts); kFailedPrecondition
  // (another format version); kDataLoss (checksum, size or fingerprint disagree with the header).
  static StatusOr<Vocabulary> load(const std::string& path);

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  // The id of `token`, or kUnkId when it is not in the vocabulary.
  int32_t id(std::string_view token) const;
  bool contains(std::string_view token) const;
  // Aborts on an id outside [0, size()) (a programmer error).
  const std::string& token(int32_t id) const;
  int64_t count(int32_t id) const;
  const std::vector<std::string>& tokens() const { return tokens_; }
  uint64_t fingerprint() const { return fingerprint_; }

  // Ids of every token of `text` (for_each_token order).
  std::vector<int32_t> encode(std::string_view text) const;

 private:
  Vocabulary(std::vector<std::string> tokens, std::vector<int64_t> counts);
  void index();

  std::vector<std::string> tokens_;                    // [size], id order
  std::vector<int64_t> counts_;                        // [size]
  std::unordered_map<std::string_view, int32_t> ids_;  // keys view tokens_
  uint64_t fingerprint_ = 0;
};

// FNV-1a 64 over the token list: for each token in id order, its byte length (8 bytes,
// little-endian) then its bytes.
uint64_t vocab_fingerprint(const std::vector<std::string>& tokens);

// OK when the fingerprints agree; otherwise kFailedPrecondition naming both fingerprints and
// sources: "vocabulary mismatch: <expected_source> was built with vocabulary fingerprint 0x...,
// but <actual_source> has fingerprint 0x...".
Status check_vocab_fingerprint(uint64_t expected, const std::string& expected_source,
                               uint64_t actual, const std::string& actual_source);

}  // namespace moe::data
