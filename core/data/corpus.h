// A tokenised corpus: the vocabulary (built from the training split, or loaded) and the token ids
// of the train, valid and test splits, with an on-disk cache so that later runs skip the text.
//
// Cache layout in `cache_dir` (created if missing), for a key K that hashes the spec (absolute
// paths, sizes and modification times of the input files, vocabulary options):
//   <name>-<K>.vocab          the vocabulary (Vocabulary::save format)
//   <name>-<K>.<split>.tok    each split's ids (token_cache.h)
// Changing a text file or an option gives another key, hence a rebuild. A cache file that fails
// validation (corrupted, truncated, vocabulary mismatch) is not an error here: the corpus is
// rebuilt from the text and the cache rewritten; `cache_note` says why.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/data/text_reader.h"
#include "core/data/tokenizer.h"
#include "core/data/vocabulary.h"

namespace moe::data {

class ShardedTokens;  // dataset.h

struct CorpusSpec {
  std::string name = "corpus";  // cache file prefix (characters outside [A-Za-z0-9._-] become _)
  std::string train_path;       // required: .txt or .txt.gz
  std::string valid_path;       // optional ("" = no valid split)
  std::string test_path;        // optional ("" = no test split)
  VocabOptions vocab;
  std::string vocab_path;  // optional: use this saved vocabulary instead of building one
};

struct TokenSplit {
  std::string name;          // "train", "valid", "test"
  std::string source;        // the text file it came from ("" when the split is absent)
  std::vector<int32_t> ids;  // [N] token ids, in memory (empty when `shards` holds them)
  std::shared_ptr<const ShardedTokens> shards;  // a prepared dataset's split (dataset.h)
  TextStats stats;                              // what the text held (words, bytes, <unk> tokens)
  int64_t size() const;
  bool present() const { return !source.empty(); }
};

// FNV-1a 64 of the split's ids (as little-endian bytes, in order): the contents fingerprint a
// checkpoint records. For shards, the value the preparation computed.
uint64_t contents_fingerprint(const TokenSplit& split);

// Mixes a text file's identity (absolute path, size, modification time) into `hash` (FNV-1a):
// what keys a cache of its tokens. An empty path mixes a marker. kNotFound for a missing file,
// kInvalidArgument (saying what it is) for one that is not a regular file.
Status hash_file_identity(const std::string& path, uint64_t* hash);

// The split's ids in memory (a copy of `ids`, or every shard read).
StatusOr<std::vector<int32_t>> materialize(const TokenSplit& split);

// ids + stats of the text file `path` (unknown words -> <unk>). Errors: see read_text_file.
StatusOr<TokenSplit> tokenize_split(const std::string& name, const std::string& path,
                                    const Vocabulary& vocab);
StatusOr<TokenSplit> tokenize_split(const std::string& name, const std::string& path,
                                    const Tokenizer& tokenizer);
// The text counts of `text` tokenized as `ids` (unknown: the ids equal to unk_id).
TextStats text_stats(std::string_view text, const std::vector<int32_t>& ids,
                     int32_t unk_id = Vocabulary::kUnkId);

struct TokenizedCorpus {
  Vocabulary vocab;  // the word vocabulary (only the special tokens with another tokenizer)
  std::shared_ptr<const Tokenizer> tokenizer;  // how the ids were made (word: over `vocab`)
  std::string vocab_source;  // the file the vocabulary was built from or loaded from
  TokenSplit train;
  TokenSplit valid;
  TokenSplit test;
  bool from_cache = false;  // true when no text file was read
  std::string cache_note;   // why the cache was not used ("" on a hit or without a cache)
};

// Builds the corpus from the text files, without any cache.
StatusOr<TokenizedCorpus> build_corpus(const CorpusSpec& spec);

// Loads the corpus from `cache_dir` when a valid cache for `spec` is there, else builds it and
// writes the cache. `cache_dir` = "" disables caching. Errors: those of the text reader (naming
// the file), kInvalidArgument for a bad spec, kInternal when the cache cannot be written.
StatusOr<TokenizedCorpus> load_or_build_corpus(const CorpusSpec& spec,
                                               const std::string& cache_dir);

}  // namespace moe::data
