#include "core/data/prepare.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/check.h"
#include "base/hash.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "core/data/text_stream.h"
#include "core/data/token_cache.h"
#include "io/file_util.h"

namespace moe::data {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr char kStateFile[] = "prepare.json";
constexpr char kStateFormat[] = "momoe-prepare";
constexpr const char* kSplitNames[3] = {"train", "valid", "test"};

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// A file's identity for the plan: absolute path, size, modification time.
StatusOr<json> file_identity(const std::string& path) {
  std::error_code ec;
  const std::string abs = fs::absolute(path, ec).lexically_normal().string();
  const auto size = fs::file_size(path, ec);
  if (ec) return internal_error("cannot stat ", path, ": ", ec.message());
  const auto mtime = fs::last_write_time(path, ec).time_since_epoch().count();
  if (ec) return internal_error("cannot stat ", path, ": ", ec.message());
  return json{
      {"path", abs}, {"size", static_cast<int64_t>(size)}, {"mtime", static_cast<int64_t>(mtime)}};
}

// One split's progress, as prepare.json records it.
struct SplitState {
  bool complete = false;
  int64_t file = 0;    // the input file to continue in
  int64_t offset = 0;  // its decompressed byte offset (a chunk end)
  int64_t line = 1;
  int64_t file_tokens = 0;  // tokens of that file before `offset`
  int64_t file_bytes = 0;
  int64_t tokens = 0;
  TextStats stats;
  uint64_t fnv = kFnv1a64Offset;
  std::vector<ShardEntry> shards;
  // The shard being written at the last resume point (open_tokens 0: none): its temporary file
  // holds at least these tokens, flushed to disk; a resume cuts it back to them.
  int64_t open_tokens = 0;
  uint32_t open_crc = 0;
  TextStats open_stats;
};

json state_json(const SplitState& s) {
  json shards = json::array();
  for (const ShardEntry& e : s.shards) {
    shards.push_back({{"file", e.file}, {"tokens", e.tokens}, {"crc32", io::hex32(e.crc32)}});
  }
  return json{{"complete", s.complete},
              {"file", s.file},
              {"offset", s.offset},
              {"line", s.line},
              {"file_tokens", s.file_tokens},
              {"file_bytes", s.file_bytes},
              {"tokens", s.tokens},
              {"words", s.stats.words},
              {"bytes", s.stats.bytes},
              {"unknown", s.stats.unknown},
              {"fnv", io::hex64(s.fnv)},
              {"shards", shards},
              {"open_shard", json{{"tokens", s.open_tokens},
                                  {"crc32", io::hex32(s.open_crc)},
                                  {"words", s.open_stats.words},
                                  {"bytes", s.open_stats.bytes},
                                  {"unknown", s.open_stats.unknown}}}};
}

SplitState state_from_json(const json& j) {
  SplitState s;
  s.complete = j.at("complete").get<bool>();
  s.file = j.at("file").get<int64_t>();
  s.offset = j.at("offset").get<int64_t>();
  s.line = j.at("line").get<int64_t>();
  s.file_tokens = j.at("file_tokens").get<int64_t>();
  s.file_bytes = j.at("file_bytes").get<int64_t>();
  s.tokens = j.at("tokens").get<int64_t>();
  s.stats.words = j.at("words").get<int64_t>();
  s.stats.bytes = j.at("bytes").get<int64_t>();
  s.stats.unknown = j.at("unknown").get<int64_t>();
  s.fnv = std::stoull(j.at("fnv").get<std::string>(), nullptr, 16);
  for (const json& e : j.at("shards")) {
    s.shards.push_back(
        {e.at("file").get<std::string>(), e.at("tokens").get<int64_t>(),
         static_cast<uint32_t>(std::stoul(e.at("crc32").get<std::string>(), nullptr, 16))});
  }
  if (j.contains("open_shard")) {
    const json& o = j.at("open_shard");
    s.open_tokens = o.at("tokens").get<int64_t>();
    s.open_crc = static_cast<uint32_t>(std::stoul(o.at("crc32").get<std::string>(), nullptr, 16));
    s.open_stats.words = o.at("words").get<int64_t>();
    s.open_stats.bytes = o.at("bytes").get<int64_t>();
    s.open_stats.unknown = o.at("unknown").get<int64_t>();
  }
  return s;
}

// Writes one shard: header placeholder, ids as they come, then the header; renamed when closed.
class ShardWriter {
 public:
  // An open shard's temporary file stays: a resume point may record it (the next preparation
  // removes it otherwise).
  ~ShardWriter() {
    if (file_ != nullptr) std::fclose(file_);
  }
  bool is_open() const { return file_ != nullptr; }
  int64_t tokens() const { return tokens_; }
  uint32_t crc() const { return crc_; }
  const TextStats& stats() const { return stats_; }

  // Flushes what is written so far to disk: a resume point.
  Status sync() {
    if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0) {
      return internal_error("cannot write shard ", tmp_, ": ", std::strerror(errno));
    }
    return Status::OK();
  }

  // Continues the shard `path` from a resume point: its temporary file, cut back to `tokens`
  // (with their payload `crc` and `stats`). A crash after the shard was renamed but before that
  // was recorded left it under its final name: it is taken back.
  Status resume(const std::string& path, int64_t tokens, uint32_t crc, const TextStats& stats) {
    path_ = path;
    tmp_ = path + io::kTmpSuffix;
    std::error_code ec;
    if (!fs::exists(tmp_, ec) && fs::exists(path_, ec)) {
      MOE_RETURN_IF_ERROR(io::rename_durable(path_, tmp_));
    }
    const int64_t bytes = kTokenCacheHeaderBytes + 4 * tokens;
    const auto size = fs::file_size(tmp_, ec);
    if (ec || static_cast<int64_t>(size) < bytes) {
      return failed_precondition_error(
          "cannot resume: ", tmp_, ec ? " is missing" : " is shorter than prepare.json records",
          "; remove ", fs::path(path).parent_path().string(), " and prepare it again");
    }
    fs::resize_file(tmp_, static_cast<uintmax_t>(bytes), ec);
    if (ec) return internal_error("cannot cut ", tmp_, " back: ", ec.message());
    file_ = std::fopen(tmp_.c_str(), "r+b");
    if (file_ == nullptr || std::fseek(file_, 0, SEEK_END) != 0) {
      return internal_error("cannot reopen shard ", tmp_, ": ", std::strerror(errno));
    }
    tokens_ = tokens;
    crc_ = crc;
    stats_ = stats;
    return Status::OK();
  }

  Status open(const std::string& path) {
    path_ = path;
    tmp_ = path + io::kTmpSuffix;
    file_ = std::fopen(tmp_.c_str(), "wb");
    if (file_ == nullptr)
      return internal_error("cannot create shard ", tmp_, ": ", std::strerror(errno));
    const char zeros[kTokenCacheHeaderBytes] = {};
    tokens_ = 0;
    crc_ = 0;
    stats_ = TextStats();
    return write(zeros, sizeof(zeros));
  }

  Status append(const std::vector<int32_t>& ids, const TextStats& stats) {
    const size_t n = ids.size() * sizeof(int32_t);
    crc_ = io::crc32_update(crc_, ids.data(), n);
    tokens_ += static_cast<int64_t>(ids.size());
    stats_ += stats;
    return write(ids.data(), n);
  }

  StatusOr<ShardEntry> close(uint64_t vocab_fingerprint) {
    TokenFileHeader h;
    h.vocab_fingerprint = vocab_fingerprint;
    h.tokens = tokens_;
    h.stats = stats_;
    h.payload_crc = crc_;
    const std::string head = encode_token_header(h);
    if (std::fseek(file_, 0, SEEK_SET) != 0) return internal_error("cannot seek in ", tmp_);
    MOE_RETURN_IF_ERROR(write(head.data(), head.size()));
    const bool flushed = std::fflush(file_) == 0;
    const int closed = std::fclose(file_);
    file_ = nullptr;
    if (!flushed || closed != 0) {
      std::remove(tmp_.c_str());
      return internal_error("cannot write shard ", tmp_, ": ", std::strerror(errno));
    }
    MOE_RETURN_IF_ERROR(io::fsync_path(tmp_));
    MOE_RETURN_IF_ERROR(io::rename_durable(tmp_, path_));
    return ShardEntry{fs::path(path_).filename().string(), tokens_, crc_};
  }

 private:
  Status write(const void* data, size_t n) {
    if (n > 0 && std::fwrite(data, 1, n, file_) != n) {
      return internal_error("cannot write shard ", tmp_, ": ", std::strerror(errno));
    }
    return Status::OK();
  }
  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  int64_t tokens_ = 0;
  uint32_t crc_ = 0;
  TextStats stats_;
};

// A chunk read from a file, and what tokenizing it gave.
struct Work {
  TextChunk chunk;
  int64_t end_offset = 0, end_line = 0;  // the input position after it
  int64_t raw_bytes = 0;                 // decompressed bytes (with a byte-order mark)
  int64_t compressed_end = 0;            // the input file's position on disk after it
  bool stopped = false;                  // a stop came before it was all tokenized
  std::vector<int32_t> ids;
  TextStats stats;
  TokenCounter counts;
  Status status;
};

class Preparer {
 public:
  Preparer(const PrepareSpec& spec, const std::function<bool(const PrepareProgress&)>& progress)
      : spec_(spec),
        progress_(progress),
        pool_(spec.threads > 0 ? spec.threads : std::max(1, available_cores())) {}
  ~Preparer() {
    if (lock_fd_ >= 0) ::close(lock_fd_);
  }

  StatusOr<DatasetIndex> run();
  // After run() failed: unless it was a stop, a preparation that had written nothing worth
  // resuming removes its files and the folders it made (its plan records the inputs' sizes and
  // times, so a fixed input would be another plan, refused in the folder); one that had says what
  // it keeps. Returns the error, saying what became of the folder.
  Status after_failure(const Status& error);

 private:
  Status check_spec();
  StatusOr<json> make_plan();
  Status open_state(const json& plan, bool* already_done);
  Status save_state();
  Status build_tokenizer();
  Status build_word_vocabulary();
  Status prepare_split(int which);
  // Reads the next batch of up to `n` chunks from `reader`; false when the file is done.
  StatusOr<bool> read_batch(TextChunkReader* reader, std::vector<Work>* batch);
  void tokenize_batch(std::vector<Work>* batch, bool count_only, const std::string& path);
  bool stop_requested() const;
  // Tokenizes a chunk (validated) into w->ids and w->stats, in pieces of about piece_bytes of whole
  // lines on every thread, asking for a stop between pieces; false when a stop came first.
  bool encode_chunk(Work* w);
  // Opens `writer` on the shard left open at the split's last resume point (if any), and says
  // where the split resumes.
  Status resume_split(int which, ShardWriter* writer);
  // Writes a tokenized chunk into the split's shards; closes a full shard.
  Status write_chunk(int which, Work* w, ShardWriter* writer);
  // Flushes the open shard and records the position: the split resumes here.
  Status save_resume_point(int which, ShardWriter* writer);
  // What a stop keeps, and how to continue.
  std::string stopped_message(int which) const;
  bool report(const std::string& phase, int64_t done, int64_t total, int64_t tokens,
              Clock::time_point t0, int64_t at_start);
  // Whether the folder holds work a rerun would resume: tokens written, or a vocabulary (or
  // SentencePiece model) built from the training text.
  bool holds_work() const;
  // Removes this preparation's files and the folders it made (while empty); true when out_dir
  // itself is gone.
  bool remove_own_files();

  const PrepareSpec& spec_;
  const std::function<bool(const PrepareProgress&)>& progress_;
  ThreadPool pool_;
  std::vector<std::string> inputs_[3];
  std::vector<int64_t> sizes_[3];
  json state_;
  SplitState splits_[3];
  std::shared_ptr<const Tokenizer> tokenizer_;
  int lock_fd_ = -1;                  // prepare.lock, held (flock) while preparing
  bool opened_ = false;               // out_dir is this preparation's (open_state succeeded)
  std::vector<std::string> created_;  // the folders open_state made, out_dir first
  // Tokenizing progress over every split, in input bytes on disk.
  int64_t tok_total_ = 0;
  int64_t tok_before_[3] = {0, 0, 0};  // the input of the splits before each
  int64_t tok_at_start_ = -1;          // where this invocation began
  Clock::time_point tok_t0_;
};

Status Preparer::check_spec() {
  if (spec_.out_dir.empty())
    return invalid_argument_error("prepare: the output folder (--out) is required");
  if (spec_.train.empty())
    return invalid_argument_error("prepare: the training text (--train) is required");
  if (spec_.shard_tokens < 1) {
    return invalid_argument_error("prepare: shard_tokens ", spec_.shard_tokens, " must be >= 1");
  }
  if (spec_.chunk_bytes < 1) {
    return invalid_argument_error("prepare: chunk_bytes ", spec_.chunk_bytes, " must be >= 1");
  }
  if (spec_.vocab.max_size != 0 && spec_.vocab.max_size < Vocabulary::kNumSpecial) {
    return invalid_argument_error("prepare: vocab max size ", spec_.vocab.max_size,
                                  " must be 0 (no cap) or >= ", Vocabulary::kNumSpecial);
  }
  if (spec_.vocab.min_count < 1) {
    return invalid_argument_error("prepare: vocab min count ", spec_.vocab.min_count,
                                  " must be >= 1");
  }
  if (spec_.tokenizer != "word" && spec_.tokenizer != "sentencepiece") {
    return invalid_argument_error("prepare: tokenizer '", spec_.tokenizer,
                                  "' is not one of word, sentencepiece");
  }
  if (spec_.tokenizer == "sentencepiece" && sentencepiece_backend() == nullptr) {
    return failed_precondition_error(
        "prepare: the sentencepiece tokenizer needs SentencePiece",
        sentencepiece_built() ? ", which runs in momoe-data, not in this process"
                              : ", which this build does not have (install libsentencepiece-dev "
                                "and rebuild; scripts/install_deps.sh does)");
  }
  return Status::OK();
}

StatusOr<json> Preparer::make_plan() {
  const std::vector<std::string>* lists[3] = {&spec_.train, &spec_.valid, &spec_.test};
  json plan;
  plan["splits"] = json::object();
  for (int k = 0; k < 3; ++k) {
    if (lists[k]->empty()) continue;
    MOE_ASSIGN_OR_RETURN(inputs_[k], expand_inputs(*lists[k]));
    json files = json::array();
    for (const std::string& f : inputs_[k]) {
      // Paths go into JSON (prepare.json, index.json), which holds UTF-8 only.
      if (!validate_utf8(f, "the name").ok()) {
        return invalid_argument_error("input file name ", f,
                                      " is not valid UTF-8: rename it (the dataset's index "
                                      "records every input by name)");
      }
      MOE_ASSIGN_OR_RETURN(json id, file_identity(f));
      if (id["size"].get<int64_t>() == 0)
        return invalid_argument_error("text file ", f, " is empty");
      sizes_[k].push_back(id["size"].get<int64_t>());
      files.push_back(std::move(id));
    }
    plan["splits"][kSplitNames[k]] = files;
  }
  plan["tokenizer"] = spec_.tokenizer;
  if (spec_.tokenizer == "word") {
    plan["vocab_max_size"] = spec_.vocab.max_size;
    plan["vocab_min_count"] = spec_.vocab.min_count;
    if (!spec_.vocab_path.empty()) {
      MOE_ASSIGN_OR_RETURN(plan["vocab"], file_identity(spec_.vocab_path));
    }
  } else if (!spec_.sp_model_path.empty()) {
    MOE_ASSIGN_OR_RETURN(plan["sp_model"], file_identity(spec_.sp_model_path));
  } else {
    plan["sp_model_type"] = spec_.sp.model_type;
    plan["sp_vocab_size"] = spec_.sp.vocab_size;
    plan["sp_max_sentences"] = spec_.sp.max_sentences;
  }
  plan["shard_tokens"] = spec_.shard_tokens;
  plan["chunk_bytes"] = spec_.chunk_bytes;
  return plan;
}

// Temporary files a crash can leave: a shard's "<name>.tok.tmp" and write_file_atomic's
// "<name>.tmp.<pid>.<n>". None holds anything a resume needs.
bool is_temporary(const std::string& name) {
  const std::string tmp = io::kTmpSuffix;  // ".tmp"
  const size_t at = name.rfind(tmp);
  if (at == std::string::npos || at == 0) return false;
  if (at + tmp.size() == name.size()) {  // a shard's "<split>-<n>.tok.tmp"
    return name.size() > 8 && name.compare(name.size() - 8, 8, ".tok.tmp") == 0;
  }
  // "<name>.tmp.<pid>.<n>"
  const std::string rest = name.substr(at + tmp.size());
  return rest.size() > 1 && rest[0] == '.' &&
         rest.find_first_not_of("0123456789.") == std::string::npos;
}

constexpr char kLockFile[] = "prepare.lock";

// Removes them, except `keep`: the shards a resume point records as open.
Status remove_temporaries(const std::string& dir, const std::vector<std::string>& keep = {}) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_temporary(name) && std::find(keep.begin(), keep.end(), name) == keep.end()) {
      fs::remove(e.path(), ec);
    }
  }
  if (ec) return internal_error("cannot clean ", dir, ": ", ec.message());
  return Status::OK();
}

// The folders creating `dir` would make: itself and its missing parents, deepest first.
std::vector<std::string> missing_folders(const std::string& dir) {
  std::vector<std::string> missing;
  std::error_code ec;
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "D/"
  for (; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing.push_back(p.string());
    if (p == p.parent_path()) break;
  }
  return missing;
}

Status Preparer::open_state(const json& plan, bool* already_done) {
  *already_done = false;
  const std::string dir = spec_.out_dir;
  const std::string state_path = join(dir, kStateFile);
  std::error_code ec;
  // A folder that is neither new, nor empty, nor a preparation is refused before anything is
  // written into it (temporaries a crash left, and the lock file, do not count).
  if (fs::exists(dir, ec) && !fs::exists(state_path, ec)) {
    if (!fs::is_directory(dir, ec))
      return invalid_argument_error("--out ", dir, " is not a folder");
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (!is_temporary(name) && name != kLockFile) {
        return failed_precondition_error("--out ", dir, " is not empty and holds no preparation (",
                                         kStateFile, "): choose an empty or new folder");
      }
    }
  }
  created_ = missing_folders(dir);
  fs::create_directories(dir, ec);
  if (ec) return internal_error("cannot create ", dir, ": ", ec.message());
  // One preparation of a folder at a time (runs sharing a cache, a second command).
  const std::string lock = join(dir, kLockFile);
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) return internal_error("cannot open ", lock, ": ", std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return failed_precondition_error("another preparation is writing ", dir, " now (", lock,
                                     " is locked): wait for it to finish, or choose another --out");
  }
  if (fs::exists(state_path, ec)) {
    MOE_ASSIGN_OR_RETURN(const std::string text, io::read_file(state_path));
    json j = json::parse(text, nullptr, false);
    const bool ours = !j.is_discarded() && j.is_object() && j.contains("format") &&
                      j["format"].is_string() && j["format"].get<std::string>() == kStateFormat;
    if (!ours) {
      return failed_precondition_error(state_path,
                                       " is not a momoe preparation record (damaged?): "
                                       "remove ",
                                       dir, " and prepare again");
    }
    if (j["plan"] != plan) {
      return failed_precondition_error(
          dir, " holds a preparation of other inputs or options (", state_path,
          " records them; a file changed since, or the command differs): choose another --out, or "
          "remove ",
          dir, " to prepare it again");
    }
    state_ = std::move(j);
    try {
      for (int k = 0; k < 3; ++k) {
        if (state_["splits"].contains(kSplitNames[k])) {
          splits_[k] = state_from_json(state_["splits"][kSplitNames[k]]);
        }
      }
      *already_done =
          state_.at("complete").get<bool>() && fs::exists(join(dir, kDatasetIndexFile), ec);
      (void)state_.at("vocab_done").get<bool>();
    } catch (const std::exception& e) {
      return failed_precondition_error(state_path, " is malformed (", e.what(), "): remove ", dir,
                                       " and prepare again");
    }
    std::vector<std::string> open_shards;
    for (int k = 0; k < 3; ++k) {
      if (splits_[k].open_tokens == 0) continue;
      open_shards.push_back(
          shard_file_name(kSplitNames[k], static_cast<int64_t>(splits_[k].shards.size())) +
          io::kTmpSuffix);
    }
    if (!*already_done) MOE_RETURN_IF_ERROR(remove_temporaries(dir, open_shards));
    opened_ = true;
    return Status::OK();
  }
  MOE_RETURN_IF_ERROR(remove_temporaries(dir));
  state_ = json{{"format", kStateFormat}, {"version", 1},        {"plan", plan},
                {"complete", false},      {"vocab_done", false}, {"splits", json::object()}};
  opened_ = true;
  return save_state();
}

Status Preparer::save_state() {
  for (int k = 0; k < 3; ++k) {
    if (!inputs_[k].empty()) state_["splits"][kSplitNames[k]] = state_json(splits_[k]);
  }
  return io::write_file_atomic(join(spec_.out_dir, kStateFile), state_.dump(2) + "\n");
}

bool Preparer::report(const std::string& phase, int64_t done, int64_t total, int64_t tokens,
                      Clock::time_point t0, int64_t at_start) {
  if (spec_.stop_requested && spec_.stop_requested()) return false;
  if (!progress_) return true;
  PrepareProgress p;
  p.phase = phase;
  p.bytes_done = done;
  p.bytes_total = total;
  p.tokens = tokens;
  p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  p.bytes_at_start = at_start;
  return progress_(p);
}

StatusOr<bool> Preparer::read_batch(TextChunkReader* reader, std::vector<Work>* batch) {
  // Two chunks per thread, but at most 1 GiB of text in flight whatever the core count.
  const size_t n = static_cast<size_t>(std::max<int64_t>(
      1, std::min<int64_t>(2 * pool_.threads(), (int64_t{1} << 30) / spec_.chunk_bytes)));
  batch->clear();
  while (batch->size() < n) {
    Work w;
    MOE_ASSIGN_OR_RETURN(const bool more, reader->next(&w.chunk));
    if (!more) return false;
    w.raw_bytes = static_cast<int64_t>(w.chunk.text.size());
    w.end_offset = w.chunk.offset + w.raw_bytes;
    w.end_line = w.chunk.line + std::count(w.chunk.text.begin(), w.chunk.text.end(), '\n');
    w.compressed_end = reader->chunks_end_on_disk();
    batch->push_back(std::move(w));
  }
  return true;
}

bool Preparer::stop_requested() const { return spec_.stop_requested && spec_.stop_requested(); }

bool Preparer::encode_chunk(Work* w) {
  // Tokens never span lines, so pieces of whole lines give the ids of the whole text.
  const std::string_view text = w->chunk.text;
  const size_t size = static_cast<size_t>(std::max<int64_t>(1, spec_.piece_bytes));
  std::vector<std::string_view> pieces;
  for (size_t at = 0; at < text.size();) {
    size_t end = std::min(text.size(), at + size);
    if (end < text.size()) {
      const size_t nl = text.find('\n', end);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    pieces.push_back(text.substr(at, end - at));
    at = end;
  }
  std::vector<std::vector<int32_t>> ids(pieces.size());
  std::vector<TextStats> stats(pieces.size());
  std::atomic<bool> stopped{false};
  pool_.run(static_cast<int64_t>(pieces.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end && !stopped; ++i) {
      if (stop_requested()) {
        stopped = true;
        return;
      }
      const size_t k = static_cast<size_t>(i);
      ids[k] = tokenizer_->encode(pieces[k]);
      stats[k] = text_stats(pieces[k], ids[k], tokenizer_->unk_id());
    }
  });
  if (stopped) return false;
  for (size_t k = 0; k < pieces.size(); ++k) {
    w->ids.insert(w->ids.end(), ids[k].begin(), ids[k].end());
    w->stats += stats[k];
  }
  return true;
}

void Preparer::tokenize_batch(std::vector<Work>* batch, bool count_only, const std::string& path) {
  const auto prepare = [&](Work& w) {
    w.status = validate_utf8(w.chunk.text, path, w.chunk.line, w.chunk.offset);
    if (w.status.ok()) drop_bom(&w.chunk);
    return w.status.ok();
  };
  if (count_only) {
    pool_.run(static_cast<int64_t>(batch->size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        Work& w = (*batch)[static_cast<size_t>(i)];
        if (prepare(w)) {
          for_each_token(w.chunk.text, [&](std::string_view token) { w.counts.add(token); });
        }
        std::string().swap(w.chunk.text);
      }
    });
    return;
  }
  // Chunk after chunk, each on every thread: chunks complete in order, so a stop (seen between
  // pieces) keeps every chunk before it, whatever the thread count. The first error or stop ends
  // the batch (the chunks after it stay untokenized; the caller stops there).
  for (Work& w : *batch) {
    if (!prepare(w)) break;
    w.stopped = !encode_chunk(&w);
    std::string().swap(w.chunk.text);
    if (w.stopped) break;
  }
}

Status Preparer::build_tokenizer() {
  if (spec_.tokenizer == "word") return build_word_vocabulary();

  if (state_["vocab_done"].get<bool>()) {
    MOE_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::load(spec_.out_dir));
    return Status::OK();
  }
  std::string bytes;
  std::string source = spec_.sp_model_path;
  if (!spec_.sp_model_path.empty()) {
    MOE_ASSIGN_OR_RETURN(bytes, io::read_file(spec_.sp_model_path));
  } else {
    const size_t n = inputs_[0].size();
    source = str_cat(
        "the ", spec_.sp.model_type, " model trained on the training split (",
        n == 1 ? inputs_[0].front() : str_cat(n, " files: ", inputs_[0].front(), ", ..."), ")");
    // The monitor is asked about every 100 ms: progress, and a stop ends the training at once.
    StatusOr<std::string> trained = train_sentencepiece(
        inputs_[0], spec_.sp, pool_.threads(), [&](const SentencePieceTrainProgress& sp) {
          if (spec_.stop_requested && spec_.stop_requested()) return false;
          if (!progress_) return true;
          PrepareProgress p;
          p.phase = "sentencepiece";
          p.seconds = sp.seconds;
          p.sentencepiece = sp;
          return progress_(p);
        });
    if (!trained.ok() && trained.status().code() == StatusCode::kAborted) {
      return aborted_error("stopped while training the SentencePiece model of ", spec_.out_dir,
                           ", before any shard: nothing is kept of the model; rerun the same "
                           "command to train it again");
    }
    MOE_ASSIGN_OR_RETURN(bytes, std::move(trained));
  }
  MOE_ASSIGN_OR_RETURN(tokenizer_, Tokenizer::sentencepiece(bytes, source));
  MOE_RETURN_IF_ERROR(tokenizer_->save(spec_.out_dir));
  state_["vocab_done"] = true;
  return save_state();
}

Status Preparer::build_word_vocabulary() {
  const std::string vocab_file = join(spec_.out_dir, kDatasetVocabFile);
  if (!spec_.vocab_path.empty()) {
    MOE_ASSIGN_OR_RETURN(Vocabulary vocab, Vocabulary::load(spec_.vocab_path));
    tokenizer_ = Tokenizer::word(std::move(vocab));
    if (!state_["vocab_done"].get<bool>()) {
      MOE_RETURN_IF_ERROR(tokenizer_->save(spec_.out_dir));
      state_["vocab_done"] = true;
      MOE_RETURN_IF_ERROR(save_state());
    }
    return Status::OK();
  }
  if (state_["vocab_done"].get<bool>()) {
    MOE_ASSIGN_OR_RETURN(Vocabulary vocab, Vocabulary::load(vocab_file));
    tokenizer_ = Tokenizer::word(std::move(vocab));
    return Status::OK();
  }
  TokenCounter counter;
  const Clock::time_point t0 = Clock::now();
  int64_t total = 0, before = 0;
  for (int64_t s : sizes_[0]) total += s;
  std::vector<Work> batch;
  for (size_t f = 0; f < inputs_[0].size(); ++f) {
    const std::string& path = inputs_[0][f];
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<TextChunkReader> reader,
                         TextChunkReader::open(path, spec_.chunk_bytes));
    bool more = true;
    while (more) {
      MOE_ASSIGN_OR_RETURN(more, read_batch(reader.get(), &batch));
      tokenize_batch(&batch, /*count_only=*/true, path);
      for (Work& w : batch) {
        MOE_RETURN_IF_ERROR(w.status);
        counter.merge(w.counts);
      }
      if (!report("vocabulary", before + reader->chunks_end_on_disk(), total, 0, t0, 0)) {
        return aborted_error("stopped while counting the words of the training text of ",
                             spec_.out_dir,
                             " (a pass that writes nothing; no shard is begun): "
                             "rerun the same command to count them again and continue");
      }
    }
    before += sizes_[0][f];
  }
  MOE_ASSIGN_OR_RETURN(Vocabulary vocab, Vocabulary::build(counter, spec_.vocab));
  tokenizer_ = Tokenizer::word(std::move(vocab));
  MOE_RETURN_IF_ERROR(tokenizer_->save(spec_.out_dir));
  state_["vocab_done"] = true;
  return save_state();
}

Status Preparer::resume_split(int k, ShardWriter* writer) {
  SplitState& st = splits_[k];
  const std::string shard =
      join(spec_.out_dir, shard_file_name(kSplitNames[k], static_cast<int64_t>(st.shards.size())));
  if (st.open_tokens > 0) {
    MOE_RETURN_IF_ERROR(writer->resume(shard, st.open_tokens, st.open_crc, st.open_stats));
  }
  if (st.file > 0 || st.offset > 0) {
    log_info("momoe-data: resuming the ", kSplitNames[k], " split of ", spec_.out_dir, " at line ",
             st.line, " of ", inputs_[k][static_cast<size_t>(st.file)], ": ", st.shards.size(),
             " shard(s) written, and ", st.open_tokens, " token(s) of ", shard, " kept");
  }
  return Status::OK();
}

Status Preparer::write_chunk(int k, Work* w, ShardWriter* writer) {
  SplitState& st = splits_[k];
  if (!writer->is_open() && !w->ids.empty()) {
    MOE_RETURN_IF_ERROR(writer->open(join(
        spec_.out_dir, shard_file_name(kSplitNames[k], static_cast<int64_t>(st.shards.size())))));
  }
  if (writer->is_open()) MOE_RETURN_IF_ERROR(writer->append(w->ids, w->stats));
  st.fnv = fnv1a64_update(st.fnv, w->ids.data(), w->ids.size() * sizeof(int32_t));
  st.tokens += static_cast<int64_t>(w->ids.size());
  st.stats += w->stats;
  st.file_tokens += static_cast<int64_t>(w->ids.size());
  st.file_bytes += w->raw_bytes;
  st.offset = w->end_offset;
  st.line = w->end_line;
  std::vector<int32_t>().swap(w->ids);
  if (writer->is_open() && writer->tokens() >= spec_.shard_tokens) {
    MOE_ASSIGN_OR_RETURN(const ShardEntry e, writer->close(tokenizer_->fingerprint()));
    st.shards.push_back(e);
    st.open_tokens = 0;
    return save_state();
  }
  return Status::OK();
}

Status Preparer::save_resume_point(int k, ShardWriter* writer) {
  SplitState& st = splits_[k];
  st.open_tokens = 0;
  if (writer->is_open()) {
    MOE_RETURN_IF_ERROR(writer->sync());
    st.open_tokens = writer->tokens();
    st.open_crc = writer->crc();
    st.open_stats = writer->stats();
  }
  return save_state();
}

std::string Preparer::stopped_message(int k) const {
  const SplitState& st = splits_[k];
  std::string kept;
  for (int j = 0; j < k; ++j) {
    if (!inputs_[j].empty()) kept += str_cat(kSplitNames[j], " is complete; ");
  }
  const std::string open = shard_file_name(kSplitNames[k], static_cast<int64_t>(st.shards.size()));
  return str_cat(
      "stopped: ", kept, "the ", kSplitNames[k], " split has ", st.shards.size(),
      " complete shard(s)",
      st.open_tokens > 0 ? str_cat(" and ", st.open_tokens, " token(s) of ", open) : std::string(),
      " written and kept; rerun the same command to continue from line ", st.line, " of ",
      inputs_[k][static_cast<size_t>(st.file)]);
}

Status Preparer::prepare_split(int k) {
  SplitState& st = splits_[k];
  if (inputs_[k].empty() || st.complete) return Status::OK();
  int64_t before = tok_before_[k];
  for (int64_t f = 0; f < st.file; ++f) before += sizes_[k][static_cast<size_t>(f)];
  ShardWriter writer;
  MOE_RETURN_IF_ERROR(resume_split(k, &writer));
  std::vector<Work> batch;
  for (int64_t f = st.file; f < static_cast<int64_t>(inputs_[k].size()); ++f) {
    const std::string& path = inputs_[k][static_cast<size_t>(f)];
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<TextChunkReader> reader,
                         TextChunkReader::open(path, spec_.chunk_bytes));
    if (f == st.file && st.offset > 0) {
      MOE_RETURN_IF_ERROR(reader->skip_to(st.offset, st.line));
    } else {
      st.file = f;
      st.offset = 0;
      st.line = 1;
      st.file_tokens = 0;
      st.file_bytes = 0;
    }
    if (tok_at_start_ < 0) {
      tok_at_start_ = before + reader->chunks_end_on_disk();
      tok_t0_ = Clock::now();
    }
    bool more = true;
    while (more) {
      MOE_ASSIGN_OR_RETURN(more, read_batch(reader.get(), &batch));
      tokenize_batch(&batch, /*count_only=*/false, path);
      int64_t done = before;  // input on disk whose text is tokenized and written
      bool stopped = false;
      for (Work& w : batch) {
        if ((stopped = w.stopped)) break;
        MOE_RETURN_IF_ERROR(w.status);
        MOE_RETURN_IF_ERROR(write_chunk(k, &w, &writer));
        done = before + w.compressed_end;
      }
      MOE_RETURN_IF_ERROR(save_resume_point(k, &writer));
      if (stopped || !report(kSplitNames[k], done, tok_total_, st.tokens, tok_t0_, tok_at_start_)) {
        return aborted_error(stopped_message(k));
      }
    }
    if (st.file_bytes == 0) return invalid_argument_error("text file ", path, " is empty");
    if (st.file_tokens == 0) {
      return invalid_argument_error("text file ", path, " has no tokens (", st.file_bytes,
                                    " bytes, all whitespace)");
    }
    before += sizes_[k][static_cast<size_t>(f)];
  }
  if (writer.is_open()) {
    MOE_ASSIGN_OR_RETURN(const ShardEntry e, writer.close(tokenizer_->fingerprint()));
    st.shards.push_back(e);
    st.open_tokens = 0;
  }
  st.complete = true;
  return save_state();
}

StatusOr<DatasetIndex> Preparer::run() {
  MOE_RETURN_IF_ERROR(check_spec());
  MOE_ASSIGN_OR_RETURN(const json plan, make_plan());
  bool done = false;
  MOE_RETURN_IF_ERROR(open_state(plan, &done));
  if (done) return read_dataset_index(spec_.out_dir);
  MOE_RETURN_IF_ERROR(build_tokenizer());
  for (int k = 0; k < 3; ++k) {
    tok_before_[k] = tok_total_;
    for (int64_t size : sizes_[k]) tok_total_ += size;
  }
  for (int k = 0; k < 3; ++k) MOE_RETURN_IF_ERROR(prepare_split(k));
  DatasetIndex index;
  index.tokenizer = tokenizer_->kind_name();
  index.vocab_fingerprint = tokenizer_->fingerprint();
  index.vocab_size = tokenizer_->size();
  index.vocab_options = spec_.vocab;
  const std::string& given = spec_.tokenizer == "word" ? spec_.vocab_path : spec_.sp_model_path;
  index.vocab_from = given.empty() ? inputs_[0].front() : given;
  for (int k = 0; k < 3; ++k) {
    if (inputs_[k].empty()) continue;
    SplitEntry e;
    e.sources = inputs_[k];
    e.tokens = splits_[k].tokens;
    e.stats = splits_[k].stats;
    e.contents_fnv = splits_[k].fnv;
    e.shards = splits_[k].shards;
    index.splits[kSplitNames[k]] = std::move(e);
  }
  MOE_RETURN_IF_ERROR(write_dataset_index(spec_.out_dir, index));
  state_["complete"] = true;
  MOE_RETURN_IF_ERROR(save_state());
  return index;
}

bool Preparer::holds_work() const {
  for (const SplitState& st : splits_) {
    if (st.tokens > 0 || st.open_tokens > 0 || !st.shards.empty()) return true;
  }
  const bool given =
      spec_.tokenizer == "word" ? !spec_.vocab_path.empty() : !spec_.sp_model_path.empty();
  return !given && state_.is_object() && state_.value("vocab_done", false);
}

bool Preparer::remove_own_files() {
  const std::string& dir = spec_.out_dir;
  std::error_code ec;
  for (const char* name : {kStateFile, kDatasetVocabFile, kSentencePieceModelFile,
                           kSentencePieceInfoFile, kLockFile}) {
    fs::remove(join(dir, name), ec);
  }
  remove_temporaries(dir).ignore_error();
  if (lock_fd_ >= 0) ::close(lock_fd_);  // released once its file is gone
  lock_fd_ = -1;
  // The folders it made, deepest first, only while empty.
  for (const std::string& made : created_) {
    if (!fs::remove(made, ec)) break;
  }
  return !fs::exists(dir, ec);
}

Status Preparer::after_failure(const Status& error) {
  const StatusCode code = error.code();
  // A stop resumes; a refused or damaged folder is not this preparation's to change.
  if (!opened_ || code == StatusCode::kAborted || code == StatusCode::kFailedPrecondition) {
    return error;
  }
  const std::string& dir = spec_.out_dir;
  // The text's fault (bad UTF-8, no tokens, a damaged .gz, a file gone), not this machine's.
  const bool bad_input = code == StatusCode::kInvalidArgument || code == StatusCode::kNotFound ||
                         code == StatusCode::kDataLoss;
  if (holds_work()) {
    if (!bad_input) return error;
    return Status(code, str_cat(error.message(), "; ", dir,
                                " keeps what was prepared before this, for these inputs as "
                                "they are now: once the input is fixed, remove ",
                                dir, " (or choose another --out) and prepare again"));
  }
  const bool gone = remove_own_files();
  return Status(code, str_cat(error.message(), "; nothing was prepared yet, so ",
                              gone ? str_cat(dir, " is removed")
                                   : str_cat("this preparation's files are removed from ", dir),
                              ": the same command starts afresh",
                              bad_input ? " once the input is fixed" : ""));
}

}  // namespace

StatusOr<std::vector<std::string>> expand_inputs(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const std::string& p : paths) {
    const std::string what = describe_non_regular(p);
    if (what == "missing") return not_found_error("input not found: ", p);
    if (what.empty()) {
      files.push_back(p);
      continue;
    }
    if (what != "a directory") {
      return invalid_argument_error(
          "input ", p, " is ", what,
          ": give regular text files (plain, .gz or .zst) or folders of them");
    }
    std::vector<std::string> inside;
    std::error_code ec;
    // Symbolic links to folders are followed (a corpus assembled from links is common).
    for (auto it = fs::recursive_directory_iterator(
             p, fs::directory_options::follow_directory_symlink, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string base = it->path().filename().string();
      if (!base.empty() && base[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) inside.push_back(it->path().string());
    }
    if (ec) return internal_error("cannot list ", p, ": ", ec.message());
    if (inside.empty())
      return invalid_argument_error("input folder ", p, " holds no regular files");
    std::sort(inside.begin(), inside.end());
    files.insert(files.end(), inside.begin(), inside.end());
  }
  return files;
}

StatusOr<DatasetIndex> prepare_dataset(
    const PrepareSpec& spec, const std::function<bool(const PrepareProgress&)>& progress) {
  Preparer p(spec, progress);
  StatusOr<DatasetIndex> index = p.run();
  if (index.ok()) return index;
  return p.after_failure(index.status());
}

namespace {
std::atomic<PrepareElsewhere> g_prepare_elsewhere{nullptr};
}  // namespace

void register_prepare_elsewhere(PrepareElsewhere prepare) { g_prepare_elsewhere = prepare; }

Status prepare_here_or_elsewhere(const PrepareSpec& spec, bool quiet) {
  const PrepareElsewhere elsewhere = g_prepare_elsewhere.load();
  if (spec.tokenizer != "sentencepiece" || sentencepiece_backend() != nullptr ||
      elsewhere == nullptr) {
    // Here (without SentencePiece and without a way elsewhere, prepare_dataset says why).
    static_cast<void>(quiet);
    return prepare_dataset(spec).status();
  }
  return elsewhere(spec, quiet);
}

}  // namespace moe::data
