// How text becomes token ids: the word vocabulary (vocabulary.h; the papers' setting) or a
// SentencePiece model (BPE or unigram), chosen in the config (data.tokenizer) or when preparing
// a dataset (momoe-data prepare --tokenizer).
//
// Both read text the same way (text_reader.h): every non-empty line is a unit that ends with the
// end-of-line token, so the text counts (TextStats: words, bytes) do not depend on the tokenizer.
// A SentencePiece model trained by momoe reserves the word vocabulary's special ids (0 `<unk>`,
// 1 `<eos>`, 2 `AAA`, a control piece never produced from text), uses byte fallback (no input is
// unknown), the identity normalisation and no whitespace folding (decode gives each line back,
// leading and repeated spaces included); a model brought by the user (`.model`) keeps its own ids
// and must have an end-of-sequence piece.
//
// Where SentencePiece runs. It is optional at build time (MOMOE_HAVE_SENTENCEPIECE, Debian's
// libsentencepiece-dev). Debian's libsentencepiece carries its own copy of the protobuf runtime,
// which cannot share a process with the system libprotobuf that momoe-train and momoe-eval use
// (it aborts at load). So the SentencePiece code lives in its own library
// (sentencepiece_backend.h), linked into momoe-data and the tests only, which register it; the
// other executables prepare a SentencePiece corpus in another process (prepare.h
// PrepareElsewhere: the launchers register `momoe-data prepare`, launcher/momoe_data_process.h),
// and read a SentencePiece tokenizer's facts (size, special ids, fingerprint) from
// tokenizer.json.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "core/data/vocabulary.h"

namespace moe::data {

inline constexpr char kSentencePieceModelFile[] = "tokenizer.model";
inline constexpr char kSentencePieceInfoFile[] = "tokenizer.json";

// True when this build has SentencePiece (momoe-data can train and use models).
bool sentencepiece_built();

struct SentencePieceOptions {
  std::string model_type = "bpe";   // "bpe" or "unigram"
  int64_t vocab_size = 8000;        // pieces, the 3 special ones and the 256 bytes included
  int64_t max_sentences = 1000000;  // lines of the training split it trains on (0: all); a larger
                                    // corpus is sampled evenly, deterministically
};

// What training a SentencePiece model has done so far, as far as it can be observed: the lines
// read, then what the trainer's own log reports (its sentences, and the pieces it has so far).
struct SentencePieceTrainProgress {
  bool training = false;  // false: reading the text; true: the trainer runs
  int64_t lines = 0;      // lines of the text read so far (reading)
  int64_t sentences = 0;  // sentences the trainer loaded (0: its log has not said yet)
  int64_t pieces = 0;     // pieces its log last reported (0: none yet); bpe grows them up to
                          // the vocabulary size, unigram prunes them down to it
  double seconds = 0;     // since training began (reading included)
};
// Asked about every 100 ms while a model trains; returning false stops the training at once
// (kAborted; nothing of it is kept).
using SentencePieceMonitor = std::function<bool(const SentencePieceTrainProgress&)>;

// A loaded SentencePiece model (the backend's).
class SentencePieceModel {
 public:
  virtual ~SentencePieceModel() = default;
  virtual int64_t size() const = 0;
  virtual int32_t unk_id() const = 0;
  virtual int32_t eos_id() const = 0;  // -1 when it has none
  virtual std::string piece(int32_t id) const = 0;
  virtual bool byte_fallback() const = 0;
  // Appends the ids of one line (without its end-of-line). Thread-safe.
  virtual void encode_line(std::string_view line, std::vector<int32_t>* ids) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
};

class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;
  // Errors: kInvalidArgument when the bytes are not a model (naming `source`).
  virtual StatusOr<std::unique_ptr<SentencePieceModel>> load(const std::string& bytes,
                                                             const std::string& source) const = 0;
  // The serialized model trained on `lines`. `monitor` (optional) sees its progress and can stop
  // it (kAborted).
  virtual StatusOr<std::string> train(const std::vector<std::string>& lines,
                                      const SentencePieceOptions& options, int threads,
                                      const SentencePieceMonitor& monitor) const = 0;
};

// The process's backend (sentencepiece_backend.h registers it); null when none is registered.
void register_sentencepiece_backend(const SentencePieceBackend* backend);
const SentencePieceBackend* sentencepiece_backend();

class Tokenizer {
 public:
  enum class Kind { kWord, kSentencePiece };

  // The word tokenizer of `vocab`.
  static std::shared_ptr<const Tokenizer> word(Vocabulary vocab);
  // A SentencePiece model from its serialized bytes (a `.model` file's contents), through this
  // process's backend; `source` names it in errors. Errors: kFailedPrecondition without a
  // backend; kInvalidArgument when the bytes are not a model or it has no end-of-sequence piece.
  static StatusOr<std::shared_ptr<const Tokenizer>> sentencepiece(std::string model_bytes,
                                                                  const std::string& source);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  Kind kind() const { return kind_; }
  // "word" or "sentencepiece" (as index.json records it).
  const char* kind_name() const { return kind_ == Kind::kWord ? "word" : "sentencepiece"; }
  // "word vocabulary of 10000 words" / "SentencePiece model of 8000 pieces (...)".
  std::string describe() const;
  int64_t size() const { return size_; }
  int32_t unk_id() const { return unk_id_; }
  int32_t eos_id() const { return eos_id_; }
  // Word: the vocabulary's fingerprint; SentencePiece: FNV-1a 64 of the model bytes. Checkpoints,
  // token files and datasets record it; a mismatch is refused.
  uint64_t fingerprint() const { return fingerprint_; }
  // The word vocabulary (the word kind only; aborts otherwise).
  const Vocabulary& vocabulary() const;
  // The files save() writes ("vocab.txt"; "tokenizer.model", "tokenizer.json").
  std::vector<std::string> files() const;

  // Whether encode/decode work in this process: always for words; for SentencePiece, when the
  // process has a backend.
  bool can_encode() const { return kind_ == Kind::kWord || sp_ != nullptr; }
  // The ids of `text` (thread-safe). Aborts when !can_encode() (a programmer error).
  std::vector<int32_t> encode(std::string_view text) const;
  // Text for ids: words joined by spaces (SentencePiece: as the model decodes), the end-of-line
  // token as a newline. Aborts when !can_encode().
  std::string decode(const std::vector<int32_t>& ids) const;

  // Writes the tokenizer's files into `dir`.
  Status save(const std::string& dir) const;
  // Loads what save() wrote in `dir` (tokenizer.model with tokenizer.json when present, else
  // vocab.txt). A SentencePiece model whose bytes do not match its tokenizer.json is refused
  // (kDataLoss, naming both); without a backend it loads without encode (can_encode() false).
  static StatusOr<std::shared_ptr<const Tokenizer>> load(const std::string& dir);

 private:
  Tokenizer() = default;
  Kind kind_ = Kind::kWord;
  Vocabulary vocab_;
  std::unique_ptr<SentencePieceModel> sp_;
  std::string model_bytes_;
  bool byte_fallback_ = false;
  int64_t size_ = 0;
  int32_t unk_id_ = 0, eos_id_ = 1;
  uint64_t fingerprint_ = 0;
};

// Trains a SentencePiece model on the lines of `files` (plain, .gz or .zst; every non-empty line,
// or an even sample of max_sentences of them) through this process's backend; returns the
// model's bytes. Deterministic: the same files and options give the same model (it trains with
// a fixed 16 threads, which the model records; `threads` is unused).
// `monitor` (optional): as SentencePieceBackend::train, also while the text is read.
// Errors: kFailedPrecondition without a backend; kInvalidArgument for bad options; the text
// reader's errors; kAborted when the monitor stopped it.
StatusOr<std::string> train_sentencepiece(const std::vector<std::string>& files,
                                          const SentencePieceOptions& options, int threads,
                                          const SentencePieceMonitor& monitor = nullptr);

}  // namespace moe::data
