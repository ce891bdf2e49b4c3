// A prepared dataset (`momoe-data prepare`, prepare.h; format: docs/data_format.md), a folder:
//
//   index.json             what the dataset holds: tokenizer, vocabulary fingerprint, and per split
//                          its input files, token and text counts, contents fingerprint and shards;
//                          checksummed (its "crc32" field covers the rest of the object)
//   vocab.txt              the word vocabulary (vocabulary.h), or
//   tokenizer.model        the SentencePiece model (tokenizer.h)
//   <split>-<NNNNN>.tok    the shards of each split, in order: token files (token_cache.h)
//
// A split's token stream is the concatenation of its shards, so the sequences a run reads (and
// which rank reads which) do not depend on how many shards there are. Training reads the shards
// with pread, straight from the page cache: the corpus is never held in memory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/data/corpus.h"

namespace moe::data {

inline constexpr int kDatasetVersion = 1;
inline constexpr char kDatasetFormat[] = "momoe-dataset";
inline constexpr char kDatasetIndexFile[] = "index.json";
inline constexpr char kDatasetVocabFile[] = "vocab.txt";

struct ShardEntry {
  std::string file;  // relative to the dataset folder
  int64_t tokens = 0;
  uint32_t crc32 = 0;  // of the payload (the token file header's)
};

struct SplitEntry {
  std::vector<std::string> sources;  // the input files, in order
  int64_t tokens = 0;
  TextStats stats;
  uint64_t contents_fnv = 0;  // FNV-1a 64 of the ids' bytes in order (contents_fingerprint)
  std::vector<ShardEntry> shards;
};

struct DatasetIndex {
  std::string tokenizer = "word";  // "word" or "sentencepiece" (Tokenizer::kind_name)
  uint64_t vocab_fingerprint = 0;  // the tokenizer's fingerprint (Tokenizer::fingerprint)
  int64_t vocab_size = 0;
  std::string vocab_from;  // the file the vocabulary was built from or loaded from
  VocabOptions vocab_options;
  std::map<std::string, SplitEntry> splits;  // "train", "valid", "test": those present
};

// The shard file name of split `name`, shard `index`: "train-00003.tok".
std::string shard_file_name(const std::string& name, int64_t index);

// Writes DIR/index.json atomically.
Status write_dataset_index(const std::string& dir, const DatasetIndex& index);
// Reads and checks DIR/index.json. Errors name the file and what to do: kInvalidArgument (DIR is
// a file, say a text: prepare a new folder from it), kNotFound (DIR missing, or no index: not a
// prepared dataset, or its preparation did not finish), kDataLoss (not JSON, checksum mismatch,
// fields missing or of the wrong type), kFailedPrecondition (another format or version).
StatusOr<DatasetIndex> read_dataset_index(const std::string& dir);

// One split's shards as one token stream.
class ShardedTokens {
 public:
  // Opens every shard of `split`, checking each header against the index (token count, crc32)
  // and the vocabulary (fingerprint). With verify_payload, also streams every payload through
  // its crc32 and checks each id is inside the vocabulary. Errors name the shard: kNotFound,
  // kDataLoss (truncated, corrupted, disagrees with the index), kFailedPrecondition (a shard of
  // another vocabulary or format version).
  static StatusOr<std::shared_ptr<const ShardedTokens>> open(
      const std::string& dir, const std::string& name, const SplitEntry& split,
      const Tokenizer& tokenizer, const std::string& tokenizer_source, bool verify_payload);
  ~ShardedTokens();
  ShardedTokens(const ShardedTokens&) = delete;
  ShardedTokens& operator=(const ShardedTokens&) = delete;

  int64_t size() const { return starts_.back(); }
  int64_t num_shards() const { return static_cast<int64_t>(fds_.size()); }
  uint64_t contents_fnv() const { return contents_fnv_; }

  // Copies tokens [begin, begin + count) into `out` (thread-safe). Errors: kInvalidArgument for a
  // range outside [0, size()); kDataLoss naming the shard for a short read or an id outside the
  // vocabulary (a shard changed after it was opened).
  Status read(int64_t begin, int64_t count, int32_t* out) const;

 private:
  ShardedTokens() = default;
  std::vector<std::string> paths_;
  std::vector<int> fds_;
  std::vector<int64_t> starts_{0};  // [shards + 1]: the first token of each shard, then size()
  int64_t vocab_size_ = 0;
  uint64_t contents_fnv_ = 0;
};

// The corpus of a prepared dataset: its tokenizer (and for the word tokenizer its vocabulary),
// and every split it holds backed by its shards (TokenSplit::shards; ids stay empty).
// verify_payload: as ShardedTokens::open. A SentencePiece dataset opens in any executable or
// build: its facts come from tokenizer.json (tokenizer.h). Errors: kInvalidArgument and
// kNotFound (not a prepared dataset, as read_dataset_index), kFailedPrecondition for a dataset of
// another format or an unknown tokenizer, and for a damaged one (a damaged index, tokenizer or
// shard; a missing shard; a shard or tokenizer of another preparation): the input must change, so
// the message names the file, `momoe-data verify DIR` (every damaged file), and the command that
// prepares it again (from DIR/prepare.json); kInternal for an I/O failure.
StatusOr<TokenizedCorpus> open_dataset(const std::string& dir, bool verify_payload);

// Checks every shard's payload (crc32, ids) of DIR and the contents fingerprints; returns a
// one-line summary. Errors as open_dataset's; damaged shards are all listed, one line each.
StatusOr<std::string> verify_dataset(const std::string& dir);

}  // namespace moe::data
