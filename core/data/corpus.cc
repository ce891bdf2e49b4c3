#include "core/data/corpus.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "base/check.h"
#include "base/hash.h"
#include "base/logging.h"
#include "core/data/dataset.h"
#include "core/data/text_reader.h"
#include "core/data/token_cache.h"
#include "io/file_util.h"

namespace moe::data {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kCacheKeyVersion = "momoe-corpus-cache-2";

std::string sanitize(const std::string& name) {
  std::string out = name.empty() ? "corpus" : name;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

StatusOr<uint64_t> cache_key(const CorpusSpec& spec) {
  uint64_t hash = fnv1a64(kCacheKeyVersion);
  for (const std::string* path :
       {&spec.train_path, &spec.valid_path, &spec.test_path, &spec.vocab_path}) {
    MOE_RETURN_IF_ERROR(hash_file_identity(*path, &hash));
  }
  const int64_t options[2] = {spec.vocab.max_size, spec.vocab.min_count};
  return fnv1a64_update(hash, options, sizeof(options));
}

Status validate_spec(const CorpusSpec& spec) {
  if (spec.train_path.empty()) {
    return invalid_argument_error("corpus '", spec.name, "': train_path is empty");
  }
  return Status::OK();
}

}  // namespace

Status hash_file_identity(const std::string& path, uint64_t* hash) {
  const auto mix = [&](const void* data, size_t size) {
    *hash = fnv1a64_update(*hash, data, size);
  };
  if (path.empty()) {
    mix("", 1);
    return Status::OK();
  }
  std::error_code ec;
  const std::string abs = fs::absolute(path, ec).lexically_normal().string();
  mix(abs.data(), abs.size() + 1);  // with the terminating NUL as a separator
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) return not_found_error("text file not found: ", path);
  if (!fs::is_regular_file(status)) {
    const char* what = fs::is_directory(status) ? "a directory"
                       : fs::is_fifo(status)    ? "a FIFO (named pipe)"
                       : fs::is_character_file(status) || fs::is_block_file(status) ? "a device"
                       : fs::is_socket(status)                                      ? "a socket"
                                               : "not a regular file";
    return invalid_argument_error("text file ", path, " is ", what,
                                  ": a corpus must be a regular file (it is read more than once, "
                                  "and its size and time key the token cache)");
  }
  const auto size = fs::file_size(path, ec);
  if (ec) return internal_error("cannot stat ", path, ": ", ec.message());
  const auto mtime = fs::last_write_time(path, ec).time_since_epoch().count();
  if (ec) return internal_error("cannot stat ", path, ": ", ec.message());
  const uint64_t fields[2] = {static_cast<uint64_t>(size), static_cast<uint64_t>(mtime)};
  mix(fields, sizeof(fields));
  return Status::OK();
}

int64_t TokenSplit::size() const {
  return shards != nullptr ? shards->size() : static_cast<int64_t>(ids.size());
}

uint64_t contents_fingerprint(const TokenSplit& split) {
  if (split.shards != nullptr) return split.shards->contents_fnv();
  return fnv1a64_update(kFnv1a64Offset, split.ids.data(), split.ids.size() * sizeof(int32_t));
}

StatusOr<std::vector<int32_t>> materialize(const TokenSplit& split) {
  if (split.shards == nullptr) return split.ids;
  std::vector<int32_t> ids(static_cast<size_t>(split.size()));
  MOE_RETURN_IF_ERROR(split.shards->read(0, split.size(), ids.data()));
  return ids;
}

TextStats text_stats(std::string_view text, const std::vector<int32_t>& ids, int32_t unk_id) {
  TextStats stats;
  const TextCounts counts = count_text(text);
  stats.words = counts.words + counts.lines;
  stats.bytes = static_cast<int64_t>(text.size());
  stats.unknown = std::count(ids.begin(), ids.end(), unk_id);
  return stats;
}

StatusOr<TokenSplit> tokenize_split(const std::string& name, const std::string& path,
                                    const Tokenizer& tokenizer) {
  TokenSplit split;
  split.name = name;
  split.source = path;
  if (path.empty()) return split;
  MOE_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  split.ids = tokenizer.encode(text);
  split.stats = text_stats(text, split.ids, tokenizer.unk_id());
  return split;
}

StatusOr<TokenSplit> tokenize_split(const std::string& name, const std::string& path,
                                    const Vocabulary& vocab) {
  return tokenize_split(name, path, *Tokenizer::word(vocab));
}

StatusOr<TokenizedCorpus> build_corpus(const CorpusSpec& spec) {
  MOE_RETURN_IF_ERROR(validate_spec(spec));
  TokenizedCorpus corpus;
  corpus.train.name = "train";
  corpus.train.source = spec.train_path;
  {
    MOE_ASSIGN_OR_RETURN(std::string train_text, read_text_file(spec.train_path));
    if (spec.vocab_path.empty()) {
      MOE_ASSIGN_OR_RETURN(corpus.vocab, Vocabulary::build_from_text(train_text, spec.vocab));
      corpus.vocab_source = spec.train_path;
    } else {
      MOE_ASSIGN_OR_RETURN(corpus.vocab, Vocabulary::load(spec.vocab_path));
      corpus.vocab_source = spec.vocab_path;
    }
    corpus.train.ids = corpus.vocab.encode(train_text);
    corpus.train.stats = text_stats(train_text, corpus.train.ids);
  }
  corpus.tokenizer = Tokenizer::word(corpus.vocab);
  MOE_ASSIGN_OR_RETURN(corpus.valid, tokenize_split("valid", spec.valid_path, *corpus.tokenizer));
  MOE_ASSIGN_OR_RETURN(corpus.test, tokenize_split("test", spec.test_path, *corpus.tokenizer));
  return corpus;
}

StatusOr<TokenizedCorpus> load_or_build_corpus(const CorpusSpec& spec,
                                               const std::string& cache_dir) {
  MOE_RETURN_IF_ERROR(validate_spec(spec));
  if (cache_dir.empty()) return build_corpus(spec);

  MOE_ASSIGN_OR_RETURN(const uint64_t key, cache_key(spec));
  const std::string prefix =
      (fs::path(cache_dir) / str_cat(sanitize(spec.name), "-", io::hex64(key).substr(2))).string();
  const std::string vocab_file = prefix + ".vocab";
  struct SplitRef {
    const char* name;
    const std::string* source;
    TokenSplit TokenizedCorpus::*member;
  };
  const SplitRef splits[3] = {{"train", &spec.train_path, &TokenizedCorpus::train},
                              {"valid", &spec.valid_path, &TokenizedCorpus::valid},
                              {"test", &spec.test_path, &TokenizedCorpus::test}};
  const auto split_file = [&](const char* name) { return str_cat(prefix, ".", name, ".tok"); };

  // Try the cache.
  std::string note;
  {
    StatusOr<Vocabulary> vocab = Vocabulary::load(vocab_file);
    if (vocab.ok()) {
      TokenizedCorpus corpus;
      corpus.vocab = std::move(vocab).value();
      corpus.vocab_source = spec.vocab_path.empty() ? spec.train_path : spec.vocab_path;
      bool hit = true;
      for (const SplitRef& s : splits) {
        TokenSplit& split = corpus.*(s.member);
        split.name = s.name;
        split.source = *s.source;
        if (s.source->empty()) continue;
        StatusOr<std::vector<int32_t>> ids =
            load_token_cache(split_file(s.name), corpus.vocab, vocab_file, &split.stats);
        if (!ids.ok()) {
          note = ids.status().to_string();
          hit = false;
          break;
        }
        split.ids = std::move(ids).value();
      }
      if (hit) {
        corpus.from_cache = true;
        corpus.tokenizer = Tokenizer::word(corpus.vocab);
        return corpus;
      }
    } else {
      note = vocab.status().to_string();
    }
  }
  if (!note.empty() && note.rfind("NOT_FOUND", 0) != 0) {
    log_warning("corpus cache for '", spec.name, "' is unusable, rebuilding: ", note);
  }

  // Build from the text and write the cache.
  MOE_ASSIGN_OR_RETURN(TokenizedCorpus corpus, build_corpus(spec));
  corpus.cache_note = note;
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  if (ec) return internal_error("cannot create cache folder ", cache_dir, ": ", ec.message());
  MOE_RETURN_IF_ERROR(corpus.vocab.save(vocab_file));
  for (const SplitRef& s : splits) {
    const TokenSplit& split = corpus.*(s.member);
    if (!split.present()) continue;
    MOE_RETURN_IF_ERROR(
        write_token_cache(split_file(s.name), split.ids, corpus.vocab.fingerprint(), split.stats));
  }
  return corpus;
}

}  // namespace moe::data
