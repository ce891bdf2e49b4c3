#include "core/data/dataset.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/hash.h"
#include "core/data/text_stream.h"
#include "core/data/token_cache.h"
#include "io/file_util.h"

namespace moe::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string index_path(const std::string& dir) {
  return (fs::path(dir) / kDatasetIndexFile).string();
}

// A path as a shell word: quoted when it holds anything but [A-Za-z0-9_./+-].
std::string shell_word(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                        "0123456789_./+-=") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Why `dir` has no index, and what to do: it is a file (a text, say: prepare a new folder from
// it), it does not exist, or it is a folder that was never prepared or not to the end.
Status no_index_error(const std::string& dir) {
  const std::string what = describe_non_regular(dir);
  if (what.empty()) {
    return invalid_argument_error(
        dir,
        " is a file, not a prepared dataset folder: prepare one from it with `momoe-data "
        "prepare --out NEW_FOLDER --train ",
        shell_word(dir),
        " ...` (NEW_FOLDER a folder that does not exist yet; --valid and --test add the "
        "evaluation texts)");
  }
  if (what == "missing") {
    return not_found_error("dataset folder ", dir, " not found (make one with `momoe-data prepare ",
                           "--out ", shell_word(dir), " --train TEXT ...`)");
  }
  if (what != "a directory") {
    return invalid_argument_error(dir, " is ", what,
                                  ", not a prepared dataset folder (one that `momoe-data prepare "
                                  "--out FOLDER --train TEXT ...` made)");
  }
  return not_found_error(
      "no ", kDatasetIndexFile, " in ", dir,
      ": not a prepared dataset (make one with `momoe-data prepare --out ", shell_word(dir),
      " --train TEXT ...`), or its preparation did not finish (run the same command again to "
      "resume it)");
}

// Reads exactly n bytes at `offset`; false on a short read (errno set on an error).
// errno is 0 after a short read (the file ends early), the error's after a failed one.
bool pread_all(int fd, char* out, int64_t n, int64_t offset) {
  errno = 0;
  while (n > 0) {
    const ssize_t got = ::pread(fd, out, static_cast<size_t>(n), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    out += got;
    n -= got;
    offset += got;
  }
  return true;
}

json stats_json(int64_t tokens, const TextStats& s) {
  json j;
  j["tokens"] = tokens;
  j["words"] = s.words;
  j["bytes"] = s.bytes;
  j["unknown"] = s.unknown;
  return j;
}

// The object without its "crc32" field, serialised the way the checksum covers it.
std::string checksummed_bytes(json j) {
  j.erase("crc32");
  return j.dump();
}

}  // namespace

std::string shard_file_name(const std::string& name, int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "-%05lld.tok", static_cast<long long>(index));
  return name + buf;
}

Status write_dataset_index(const std::string& dir, const DatasetIndex& index) {
  json j;
  j["format"] = kDatasetFormat;
  j["version"] = kDatasetVersion;
  j["tokenizer"] = {
      {"kind", index.tokenizer},
      {"vocab", index.tokenizer == "word" ? kDatasetVocabFile : kSentencePieceModelFile},
      {"vocab_fingerprint", io::hex64(index.vocab_fingerprint)},
      {"vocab_size", index.vocab_size},
      {"vocab_from", index.vocab_from},
      {"vocab_max_size", index.vocab_options.max_size},
      {"vocab_min_count", index.vocab_options.min_count}};
  json splits = json::object();
  for (const auto& [name, s] : index.splits) {
    json js = stats_json(s.tokens, s.stats);
    js["sources"] = s.sources;
    js["contents_fnv"] = io::hex64(s.contents_fnv);
    json shards = json::array();
    for (const ShardEntry& e : s.shards) {
      shards.push_back({{"file", e.file}, {"tokens", e.tokens}, {"crc32", io::hex32(e.crc32)}});
    }
    js["shards"] = shards;
    splits[name] = js;
  }
  j["splits"] = splits;
  j["crc32"] = io::hex32(io::crc32_of(checksummed_bytes(j)));
  return io::write_file_atomic(index_path(dir), j.dump(2) + "\n");
}

StatusOr<DatasetIndex> read_dataset_index(const std::string& dir) {
  const std::string path = index_path(dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::exists(path, ec)) return no_index_error(dir);
  MOE_ASSIGN_OR_RETURN(const std::string text, io::read_file(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return data_loss_error("dataset index ", path, " is not a JSON object (damaged or truncated)");
  }
  try {
    if (j.value("format", std::string()) != kDatasetFormat) {
      return failed_precondition_error("dataset index ", path, " has format '",
                                       j.value("format", std::string()), "', expected '",
                                       kDatasetFormat, "'");
    }
    const std::string stored = j.value("crc32", std::string());
    const std::string actual = io::hex32(io::crc32_of(checksummed_bytes(j)));
    if (stored != actual) {
      return data_loss_error("dataset index ", path, " is damaged: crc32 ", actual, ", stored ",
                             stored.empty() ? std::string("none") : stored);
    }
    if (j.at("version").get<int>() != kDatasetVersion) {
      return failed_precondition_error("dataset index ", path, " has format version ",
                                       j.at("version").get<int>(), "; this build reads version ",
                                       kDatasetVersion);
    }
    DatasetIndex index;
    const json& t = j.at("tokenizer");
    index.tokenizer = t.at("kind").get<std::string>();
    index.vocab_fingerprint =
        std::stoull(t.at("vocab_fingerprint").get<std::string>(), nullptr, 16);
    index.vocab_size = t.at("vocab_size").get<int64_t>();
    index.vocab_from = t.at("vocab_from").get<std::string>();
    index.vocab_options.max_size = t.at("vocab_max_size").get<int64_t>();
    index.vocab_options.min_count = t.at("vocab_min_count").get<int64_t>();
    for (const auto& [name, js] : j.at("splits").items()) {
      SplitEntry s;
      s.tokens = js.at("tokens").get<int64_t>();
      s.stats.words = js.at("words").get<int64_t>();
      s.stats.bytes = js.at("bytes").get<int64_t>();
      s.stats.unknown = js.at("unknown").get<int64_t>();
      s.sources = js.at("sources").get<std::vector<std::string>>();
      s.contents_fnv = std::stoull(js.at("contents_fnv").get<std::string>(), nullptr, 16);
      int64_t sum = 0;
      for (const json& e : js.at("shards")) {
        ShardEntry shard;
        shard.file = e.at("file").get<std::string>();
        shard.tokens = e.at("tokens").get<int64_t>();
        shard.crc32 =
            static_cast<uint32_t>(std::stoul(e.at("crc32").get<std::string>(), nullptr, 16));
        if (shard.file.empty() || shard.file.find('/') != std::string::npos || shard.tokens < 0) {
          return data_loss_error("dataset index ", path, ": split ", name,
                                 " has a bad shard entry ", e.dump());
        }
        sum += shard.tokens;
        s.shards.push_back(shard);
      }
      if (sum != s.tokens) {
        return data_loss_error("dataset index ", path, ": split ", name, " says ", s.tokens,
                               " tokens, its shards hold ", sum);
      }
      index.splits[name] = std::move(s);
    }
    if (index.splits.count("train") == 0) {
      return data_loss_error("dataset index ", path, " has no train split");
    }
    return index;
  } catch (const std::exception& e) {
    return data_loss_error("dataset index ", path, " is malformed: ", e.what());
  }
}

ShardedTokens::~ShardedTokens() {
  for (int fd : fds_) ::close(fd);
}

StatusOr<std::shared_ptr<const ShardedTokens>> ShardedTokens::open(
    const std::string& dir, const std::string& name, const SplitEntry& split,
    const Tokenizer& tokenizer, const std::string& vocab_source, bool verify_payload) {
  std::shared_ptr<ShardedTokens> t(new ShardedTokens());
  t->vocab_size_ = tokenizer.size();
  t->contents_fnv_ = split.contents_fnv;
  std::vector<char> buf;
  for (const ShardEntry& e : split.shards) {
    const std::string path = (fs::path(dir) / e.file).string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) {
        return not_found_error("shard ", path, " of split ", name, " is missing (the dataset's ",
                               kDatasetIndexFile, " lists it)");
      }
      return internal_error("cannot open shard ", path, ": ", std::strerror(err));
    }
    t->fds_.push_back(fd);  // closed by the destructor, also on the errors below
    t->paths_.push_back(path);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    char head[kTokenCacheHeaderBytes] = {};
    if (size < 0) return internal_error("cannot size shard ", path, ": ", std::strerror(errno));
    if (size > 0 && !pread_all(fd, head, std::min<int64_t>(size, kTokenCacheHeaderBytes), 0)) {
      return internal_error("cannot read shard ", path, ": ",
                            errno != 0 ? std::strerror(errno) : "it ends inside its header");
    }
    MOE_ASSIGN_OR_RETURN(const TokenFileHeader h, decode_token_header(head, size, path));
    MOE_RETURN_IF_ERROR(check_vocab_fingerprint(tokenizer.fingerprint(), vocab_source,
                                                h.vocab_fingerprint, str_cat("shard ", path)));
    if (h.tokens != e.tokens || h.payload_crc != e.crc32) {
      return data_loss_error("shard ", path, " does not match the dataset's index: it holds ",
                             h.tokens, " tokens with crc32 ", io::hex32(h.payload_crc),
                             ", the index says ", e.tokens, " with crc32 ", io::hex32(e.crc32),
                             " (a shard from another preparation?)");
    }
    if (verify_payload) {
      buf.resize(size_t{1} << 22);
      uint32_t crc = 0;
      std::string bad_id;
      for (int64_t at = 0; at < h.tokens * 4;) {
        const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), h.tokens * 4 - at);
        if (!pread_all(fd, buf.data(), n, kTokenCacheHeaderBytes + at)) {
          return data_loss_error("cannot read shard ", path, " at byte ",
                                 kTokenCacheHeaderBytes + at, ": ",
                                 errno != 0 ? std::strerror(errno) : "it ends early");
        }
        crc = io::crc32_update(crc, buf.data(), static_cast<size_t>(n));
        for (int64_t i = 0; i < n / 4 && bad_id.empty(); ++i) {
          int32_t id;
          std::memcpy(&id, buf.data() + 4 * i, 4);
          if (id < 0 || id >= t->vocab_size_) {
            bad_id = str_cat("token ", at / 4 + i, " has id ", id, " outside the vocabulary [0, ",
                             t->vocab_size_, ")");
          }
        }
        at += n;
      }
      if (crc != h.payload_crc) {
        return data_loss_error("shard ", path, " is corrupted: payload crc32 ", io::hex32(crc),
                               ", stored ", io::hex32(h.payload_crc),
                               bad_id.empty() ? std::string() : str_cat(" (", bad_id, ")"));
      }
      if (!bad_id.empty()) return data_loss_error("shard ", path, ": ", bad_id);
    }
    t->starts_.push_back(t->starts_.back() + h.tokens);
  }
  return std::shared_ptr<const ShardedTokens>(std::move(t));
}

Status ShardedTokens::read(int64_t begin, int64_t count, int32_t* out) const {
  if (begin < 0 || count < 0 || count > size() || begin > size() - count) {
    return invalid_argument_error("tokens [", begin, ", ", begin + count, ") outside [0, ", size(),
                                  ")");
  }
  // The shard holding `begin`: the last start <= begin.
  size_t s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) -
                                 starts_.begin()) -
             1;
  int32_t* dst = out;
  while (count > 0) {
    const int64_t local = begin - starts_[s];
    const int64_t n = std::min(count, starts_[s + 1] - begin);
    if (n > 0) {
      if (!pread_all(fds_[s], reinterpret_cast<char*>(dst), n * 4,
                     kTokenCacheHeaderBytes + local * 4)) {
        return data_loss_error("cannot read tokens ", local, "..", local + n, " of shard ",
                               paths_[s], " (", errno != 0 ? std::strerror(errno) : "short read",
                               "): did it change after it was opened?");
      }
      for (int64_t i = 0; i < n; ++i) {
        if (dst[i] < 0 || dst[i] >= vocab_size_) {
          return data_loss_error("shard ", paths_[s], ": token ", local + i, " has id ", dst[i],
                                 " outside the vocabulary [0, ", vocab_size_, ")");
        }
      }
    }
    dst += n;
    begin += n;
    count -= n;
    ++s;
  }
  return Status::OK();
}

namespace {

// The `momoe-data prepare` command that made DIR, from the plan its prepare.json records
// (prepare.h); "" when it has none that can be read.
std::string prepare_command(const std::string& dir) {
  StatusOr<std::string> text = io::read_file((fs::path(dir) / "prepare.json").string());
  if (!text.ok()) return "";
  const json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("plan")) return "";
  try {
    const json& plan = j.at("plan");
    std::string cmd = str_cat("momoe-data prepare --out ", shell_word(dir));
    for (const char* split : {"train", "valid", "test"}) {
      if (!plan.at("splits").contains(split)) continue;
      for (const json& f : plan.at("splits").at(split)) {
        cmd += str_cat(" --", split, " ", shell_word(f.at("path").get<std::string>()));
      }
    }
    const auto path_of = [&](const char* key) {
      return plan.at(key).at("path").get<std::string>();
    };
    if (plan.at("tokenizer").get<std::string>() == "word") {
      cmd += plan.contains("vocab")
                 ? str_cat(" --vocab ", shell_word(path_of("vocab")))
                 : str_cat(" --vocab-max-size ", plan.at("vocab_max_size").get<int64_t>(),
                           " --vocab-min-count ", plan.at("vocab_min_count").get<int64_t>());
    } else {
      cmd +=
          plan.contains("sp_model")
              ? str_cat(" --tokenizer sentencepiece --sp-model ", shell_word(path_of("sp_model")))
              : str_cat(" --tokenizer sentencepiece --sp-type ",
                        plan.at("sp_model_type").get<std::string>(), " --sp-vocab-size ",
                        plan.at("sp_vocab_size").get<int64_t>(), " --sp-max-sentences ",
                        plan.at("sp_max_sentences").get<int64_t>());
    }
    return cmd + str_cat(" --shard-tokens ", plan.at("shard_tokens").get<int64_t>(), " --chunk-mb ",
                         std::max<int64_t>(1, plan.at("chunk_bytes").get<int64_t>() >> 20));
  } catch (const std::exception&) {
    return "";
  }
}

// What to do about a damaged dataset DIR: see every damaged file (unless this is verify), then
// prepare it again.
std::string damaged_advice(const std::string& dir, bool from_verify) {
  const std::string cmd = prepare_command(dir);
  return str_cat(
      from_verify
          ? ""
          : str_cat("; run `momoe-data verify ", shell_word(dir), "` to see every damaged file"),
      "; to repair it, remove ", shell_word(dir), " and prepare it again",
      cmd.empty() ? std::string(" (momoe-data prepare ... --out DIR)") : str_cat(": ", cmd));
}

// An error that means the dataset's files are damaged, truncated, missing or swapped (not an I/O
// failure of this machine) becomes kFailedPrecondition: the input must change (exit 2).
Status as_damaged(const std::string& dir, const Status& s, bool from_verify) {
  if (s.code() != StatusCode::kDataLoss && s.code() != StatusCode::kFailedPrecondition &&
      s.code() != StatusCode::kNotFound) {
    return s;
  }
  return failed_precondition_error("dataset ", dir, " is damaged: ", s.message(),
                                   damaged_advice(dir, from_verify));
}

// The tokenizer of a dataset, checked against its index.
Status open_tokenizer(const std::string& dir, const DatasetIndex& index, TokenizedCorpus* corpus) {
  if (index.tokenizer == "word") {
    corpus->vocab_source = (fs::path(dir) / kDatasetVocabFile).string();
    MOE_ASSIGN_OR_RETURN(corpus->vocab, Vocabulary::load(corpus->vocab_source));
    corpus->tokenizer = Tokenizer::word(corpus->vocab);
  } else {
    // Its facts come from tokenizer.json (checked against the model's bytes): reading shards
    // needs no SentencePiece, so this works in every executable and build.
    corpus->vocab_source = (fs::path(dir) / kSentencePieceModelFile).string();
    MOE_ASSIGN_OR_RETURN(corpus->tokenizer, Tokenizer::load(dir));
  }
  MOE_RETURN_IF_ERROR(check_vocab_fingerprint(index.vocab_fingerprint, index_path(dir),
                                              corpus->tokenizer->fingerprint(),
                                              corpus->vocab_source));
  if (corpus->tokenizer->size() != index.vocab_size) {
    return data_loss_error("its tokenizer has ", corpus->tokenizer->size(), " tokens, ",
                           index_path(dir), " says ", index.vocab_size);
  }
  return Status::OK();
}

// The index of DIR, refusing a tokenizer kind this build does not know.
StatusOr<DatasetIndex> read_index(const std::string& dir, bool from_verify) {
  StatusOr<DatasetIndex> index = read_dataset_index(dir);
  if (!index.ok()) {
    if (index.status().code() == StatusCode::kDataLoss) {
      return as_damaged(dir, index.status(), from_verify);
    }
    return index.status();
  }
  if (index->tokenizer != "word" && index->tokenizer != "sentencepiece") {
    return failed_precondition_error("dataset ", dir, " uses the '", index->tokenizer,
                                     "' tokenizer, which this build does not know");
  }
  return index;
}

Status open_splits(const std::string& dir, const DatasetIndex& index, bool verify_payload,
                   TokenizedCorpus* corpus) {
  for (auto [name, split] : {std::pair{"train", &corpus->train}, std::pair{"valid", &corpus->valid},
                             std::pair{"test", &corpus->test}}) {
    split->name = name;
    const auto it = index.splits.find(name);
    if (it == index.splits.end()) continue;
    split->source = str_cat(dir, " (", name, ")");
    split->stats = it->second.stats;
    MOE_ASSIGN_OR_RETURN(split->shards,
                         ShardedTokens::open(dir, name, it->second, *corpus->tokenizer,
                                             corpus->vocab_source, verify_payload));
  }
  return Status::OK();
}

}  // namespace

StatusOr<TokenizedCorpus> open_dataset(const std::string& dir, bool verify_payload) {
  MOE_ASSIGN_OR_RETURN(const DatasetIndex index, read_index(dir, /*from_verify=*/false));
  TokenizedCorpus corpus;
  Status s = open_tokenizer(dir, index, &corpus);
  if (s.ok()) s = open_splits(dir, index, verify_payload, &corpus);
  if (!s.ok()) return as_damaged(dir, s, /*from_verify=*/false);
  corpus.from_cache = true;
  return corpus;
}

namespace {

// Every damaged shard of DIR, one message each (each shard checked on its own).
std::vector<std::string> damaged_shards(const std::string& dir, const DatasetIndex& index,
                                        const TokenizedCorpus& corpus) {
  std::vector<std::string> damaged;
  for (const auto& [name, split] : index.splits) {
    for (const ShardEntry& e : split.shards) {
      SplitEntry one;
      one.shards = {e};
      const auto opened = ShardedTokens::open(dir, name, one, *corpus.tokenizer,
                                              corpus.vocab_source, /*verify_payload=*/true);
      if (!opened.ok()) damaged.push_back(opened.status().message());
    }
  }
  return damaged;
}

// The contents fingerprint of a split, checked against the index: the shards' checksums are per
// shard, this is over their order.
Status check_contents(const std::string& dir, const TokenSplit& s) {
  std::vector<int32_t> block(size_t{1} << 20);
  uint64_t h = kFnv1a64Offset;
  for (int64_t at = 0; at < s.size();) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(block.size()), s.size() - at);
    MOE_RETURN_IF_ERROR(s.shards->read(at, n, block.data()));
    h = fnv1a64_update(h, block.data(), static_cast<size_t>(n) * 4);
    at += n;
  }
  if (h != s.shards->contents_fnv()) {
    return data_loss_error("split ", s.name, " has contents fingerprint ", io::hex64(h),
                           ", the index says ", io::hex64(s.shards->contents_fnv()),
                           " (shards reordered or replaced?)");
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::string> verify_dataset(const std::string& dir) {
  MOE_ASSIGN_OR_RETURN(const DatasetIndex index, read_index(dir, /*from_verify=*/true));
  TokenizedCorpus corpus;
  if (Status s = open_tokenizer(dir, index, &corpus); !s.ok()) {
    return as_damaged(dir, s, /*from_verify=*/true);
  }
  const std::vector<std::string> damaged = damaged_shards(dir, index, corpus);
  if (!damaged.empty()) {
    std::string list;
    for (const std::string& d : damaged) list += str_cat("\n  ", d);
    return failed_precondition_error("dataset ", dir, " has ", damaged.size(),
                                     " damaged shard(s):", list, "\n",
                                     damaged_advice(dir, /*from_verify=*/true).substr(2));
  }
  if (Status s = open_splits(dir, index, /*verify_payload=*/false, &corpus); !s.ok()) {
    return as_damaged(dir, s, /*from_verify=*/true);
  }
  std::string out = str_cat(dir, ": ok; ", corpus.tokenizer->describe());
  for (const TokenSplit* s : {&corpus.train, &corpus.valid, &corpus.test}) {
    if (!s->present()) continue;
    if (Status c = check_contents(dir, *s); !c.ok()) return as_damaged(dir, c, true);
    out +=
        str_cat("; ", s->name, " ", s->size(), " tokens in ", s->shards->num_shards(), " shard(s)");
  }
  return out;
}

}  // namespace moe::data
