#include "core/data/tokenizer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/hash.h"
#include "core/data/text_reader.h"
#include "core/data/text_stream.h"
#include "io/file_util.h"

namespace moe::data {
namespace {

namespace fs = std::filesystem;

constexpr char kVocabFile[] = "vocab.txt";
std::atomic<const SentencePieceBackend*> g_backend{nullptr};

// Calls on_line(line) for every non-empty line of `text` (a line with a non-whitespace byte: the
// reader's rule for where <eos> goes), without its trailing '\r'.
template <typename OnLine>
void for_each_line(std::string_view text, OnLine&& on_line) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    if (std::any_of(line.begin(), line.end(), [](char c) { return !is_ascii_space(c); })) {
      while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      on_line(line);
    }
    begin = end + 1;
  }
}

Status no_backend(const std::string& what) {
  if (!sentencepiece_built()) {
    return failed_precondition_error(
        what,
        " needs SentencePiece, which this build does not have (install libsentencepiece-dev "
        "and rebuild; scripts/install_deps.sh does), or use the word tokenizer");
  }
  return failed_precondition_error(what, " runs in momoe-data (momoe-data prepare), not here");
}

}  // namespace

bool sentencepiece_built() { return MOMOE_HAVE_SENTENCEPIECE != 0; }

void register_sentencepiece_backend(const SentencePieceBackend* backend) { g_backend = backend; }
const SentencePieceBackend* sentencepiece_backend() { return g_backend; }

Tokenizer::~Tokenizer() = default;

std::shared_ptr<const Tokenizer> Tokenizer::word(Vocabulary vocab) {
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  t->kind_ = Kind::kWord;
  t->size_ = vocab.size();
  t->unk_id_ = Vocabulary::kUnkId;
  t->eos_id_ = Vocabulary::kEosId;
  t->fingerprint_ = vocab.fingerprint();
  t->vocab_ = std::move(vocab);
  return t;
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::sentencepiece(std::string model_bytes,
                                                                    const std::string& source) {
  const SentencePieceBackend* backend = sentencepiece_backend();
  if (backend == nullptr) return no_backend(str_cat("the SentencePiece model ", source));
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  t->kind_ = Kind::kSentencePiece;
  MOE_ASSIGN_OR_RETURN(t->sp_, backend->load(model_bytes, source));
  if (t->sp_->eos_id() < 0) {
    return invalid_argument_error("SentencePiece model ", source,
                                  " has no end-of-sequence piece (eos_id = -1): momoe ends every "
                                  "line with one; train it with an eos_id");
  }
  t->size_ = t->sp_->size();
  t->unk_id_ = t->sp_->unk_id();
  t->eos_id_ = t->sp_->eos_id();
  t->byte_fallback_ = t->sp_->byte_fallback();
  t->fingerprint_ = fnv1a64(model_bytes);
  t->model_bytes_ = std::move(model_bytes);
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

const Vocabulary& Tokenizer::vocabulary() const {
  MOE_CHECK(kind_ == Kind::kWord, "Tokenizer::vocabulary() of a SentencePiece tokenizer");
  return vocab_;
}

std::vector<std::string> Tokenizer::files() const {
  if (kind_ == Kind::kWord) return {kVocabFile};
  return {kSentencePieceModelFile, kSentencePieceInfoFile};
}

std::string Tokenizer::describe() const {
  if (kind_ == Kind::kWord) return str_cat("word vocabulary of ", size_, " words");
  return str_cat("SentencePiece model of ", size_, " pieces (",
                 byte_fallback_ ? "byte fallback" : "no byte fallback", ", fingerprint ",
                 io::hex64(fingerprint_).substr(2), ")");
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (kind_ == Kind::kWord) return vocab_.encode(text);
  MOE_CHECK(sp_ != nullptr, "Tokenizer::encode: SentencePiece runs in momoe-data only");
  std::vector<int32_t> ids;
  for_each_line(text, [&](std::string_view line) {
    sp_->encode_line(line, &ids);
    ids.push_back(eos_id_);
  });
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  if (kind_ == Kind::kWord) {
    bool line_start = true;
    for (int32_t id : ids) {
      if (id == Vocabulary::kEosId) {
        out += '\n';
        line_start = true;
        continue;
      }
      if (!line_start) out += ' ';
      out += vocab_.token(id);
      line_start = false;
    }
    return out;
  }
  MOE_CHECK(sp_ != nullptr, "Tokenizer::decode: SentencePiece runs in momoe-data only");
  std::vector<int32_t> line;
  for (int32_t id : ids) {
    if (id == eos_id_) {
      out += sp_->decode(line);
      out += '\n';
      line.clear();
    } else {
      line.push_back(id);
    }
  }
  out += sp_->decode(line);
  return out;
}

Status Tokenizer::save(const std::string& dir) const {
  if (kind_ == Kind::kWord) return vocab_.save((fs::path(dir) / kVocabFile).string());
  MOE_RETURN_IF_ERROR(
      io::write_file_atomic((fs::path(dir) / kSentencePieceModelFile).string(), model_bytes_));
  nlohmann::ordered_json j;
  j["kind"] = "sentencepiece";
  j["model"] = kSentencePieceModelFile;
  j["fingerprint"] = io::hex64(fingerprint_);
  j["size"] = size_;
  j["unk_id"] = unk_id_;
  j["eos_id"] = eos_id_;
  j["byte_fallback"] = byte_fallback_;
  return io::write_file_atomic((fs::path(dir) / kSentencePieceInfoFile).string(), j.dump(2) + "\n");
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::load(const std::string& dir) {
  const std::string model = (fs::path(dir) / kSentencePieceModelFile).string();
  if (!fs::exists(model)) {
    MOE_ASSIGN_OR_RETURN(Vocabulary vocab, Vocabulary::load((fs::path(dir) / kVocabFile).string()));
    return word(std::move(vocab));
  }
  const std::string info_path = (fs::path(dir) / kSentencePieceInfoFile).string();
  MOE_ASSIGN_OR_RETURN(std::string bytes, io::read_file(model));
  MOE_ASSIGN_OR_RETURN(const std::string info_text, io::read_file(info_path));
  const nlohmann::json info = nlohmann::json::parse(info_text, nullptr, false);
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  t->kind_ = Kind::kSentencePiece;
  try {
    if (info.is_discarded() || info.at("kind").get<std::string>() != "sentencepiece") {
      return data_loss_error(info_path, " is not a SentencePiece tokenizer description");
    }
    t->size_ = info.at("size").get<int64_t>();
    t->unk_id_ = info.at("unk_id").get<int32_t>();
    t->eos_id_ = info.at("eos_id").get<int32_t>();
    t->byte_fallback_ = info.at("byte_fallback").get<bool>();
    t->fingerprint_ = std::stoull(info.at("fingerprint").get<std::string>(), nullptr, 16);
  } catch (const std::exception& e) {
    return data_loss_error(info_path, " is malformed: ", e.what());
  }
  if (fnv1a64(bytes) != t->fingerprint_) {
    return data_loss_error(model, " has fingerprint ", io::hex64(fnv1a64(bytes)), ", but ",
                           info_path, " says ", io::hex64(t->fingerprint_),
                           " (the model was replaced or damaged)");
  }
  if (t->size_ < 1 || t->eos_id_ < 0 || t->eos_id_ >= t->size_ || t->unk_id_ < 0 ||
      t->unk_id_ >= t->size_) {
    return data_loss_error(info_path, " has ids outside the model's ", t->size_, " pieces");
  }
  if (const SentencePieceBackend* backend = sentencepiece_backend()) {
    MOE_ASSIGN_OR_RETURN(t->sp_, backend->load(bytes, model));
    if (t->sp_->size() != t->size_ || t->sp_->eos_id() != t->eos_id_ ||
        t->sp_->unk_id() != t->unk_id_) {
      return data_loss_error(model, " and ", info_path, " disagree on the size or ids");
    }
  }
  t->model_bytes_ = std::move(bytes);
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

StatusOr<std::string> train_sentencepiece(const std::vector<std::string>& files,
                                          const SentencePieceOptions& options, int threads,
                                          const SentencePieceMonitor& monitor) {
  const SentencePieceBackend* backend = sentencepiece_backend();
  if (backend == nullptr) return no_backend("training a SentencePiece model");
  if (options.model_type != "bpe" && options.model_type != "unigram") {
    return invalid_argument_error("SentencePiece model type '", options.model_type,
                                  "' is not one of bpe, unigram");
  }
  if (options.vocab_size <= 260) {
    return invalid_argument_error("SentencePiece vocabulary size ", options.vocab_size,
                                  " must be > 260 (3 special pieces and 256 bytes)");
  }
  if (options.max_sentences < 0) {
    return invalid_argument_error("SentencePiece max_sentences ", options.max_sentences,
                                  " must be >= 0 (0: every line)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  SentencePieceTrainProgress progress;
  const auto visit = [&](auto&& on_line) -> Status {
    for (const std::string& path : files) {
      // Small chunks: the monitor is asked after each (a stop is seen within a fraction of a
      // second).
      MOE_ASSIGN_OR_RETURN(std::unique_ptr<TextChunkReader> reader,
                           TextChunkReader::open(path, int64_t{1} << 20));
      TextChunk chunk;
      while (true) {
        MOE_ASSIGN_OR_RETURN(const bool more, reader->next(&chunk));
        if (!more) break;
        MOE_RETURN_IF_ERROR(validate_utf8(chunk.text, path, chunk.line, chunk.offset));
        drop_bom(&chunk);
        for_each_line(chunk.text, [&](std::string_view line) {
          ++progress.lines;
          on_line(line);
        });
        progress.seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (monitor && !monitor(progress)) {
          return aborted_error("stopped while reading the text to train the SentencePiece model");
        }
      }
    }
    return Status::OK();
  };
  // An even sample of the lines (every stride-th), so the same text gives the same sample.
  int64_t total = 0;
  MOE_RETURN_IF_ERROR(visit([&](std::string_view) { ++total; }));
  if (total == 0) return invalid_argument_error("no text to train a SentencePiece model on");
  const int64_t stride =
      options.max_sentences > 0
          ? std::max<int64_t>(1, (total + options.max_sentences - 1) / options.max_sentences)
          : 1;
  std::vector<std::string> lines;
  int64_t index = 0;
  progress.lines = 0;
  MOE_RETURN_IF_ERROR(visit([&](std::string_view line) {
    if (index++ % stride == 0) lines.emplace_back(line);
  }));
  if (!monitor) return backend->train(lines, options, threads, nullptr);
  // The backend's seconds count from its start: the monitor sees them from ours.
  const double reading = progress.seconds;
  return backend->train(lines, options, threads, [&](const SentencePieceTrainProgress& p) {
    SentencePieceTrainProgress q = p;
    q.lines = progress.lines;
    q.seconds += reading;
    return monitor(q);
  });
}

}  // namespace moe::data
