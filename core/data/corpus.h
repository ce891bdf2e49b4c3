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
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/data/vocabulary.h"

namespace moe::data {

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
  std::vector<int32_t> ids;  // [N] token ids
  int64_t size() const { return static_cast<int64_t>(ids.size()); }
  bool present() const { return !source.empty(); }
};

struct TokenizedCorpus {
  Vocabulary vocab;
  std::string vocab_source;  // the file the vocabulary was built from or loaded from
  TokenSplit train;
  TokenSplit valid;
  TokenSplit test;
  bool from_cache = false;  // true when no text file was read
  std::string cache_note;   // why the cache was not used ("" on a hit or without a cache)
};

// Tokenises one text file with `vocab` (unknown words -> <unk>). Errors: see read_text_file.
StatusOr<std::vector<int32_t>> tokenize_file(const std::string& path, const Vocabulary& vocab);

// Builds the corpus from the text files, without any cache.
StatusOr<TokenizedCorpus> build_corpus(const CorpusSpec& spec);

// Loads the corpus from `cache_dir` when a valid cache for `spec` is there, else builds it and
// writes the cache. `cache_dir` = "" disables caching. Errors: those of the text reader (naming
// the file), kInvalidArgument for a bad spec, kInternal when the cache cannot be written.
StatusOr<TokenizedCorpus> load_or_build_corpus(const CorpusSpec& spec,
                                               const std::string& cache_dir);

}  // namespace moe::data
