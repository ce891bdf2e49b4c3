#include "core/data/sentencepiece_backend.h"

#include <fcntl.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "core/data/tokenizer.h"
#include "core/data/vocabulary.h"

namespace moe::data {
namespace {

class Model final : public SentencePieceModel {
 public:
  int64_t size() const override { return processor_.GetPieceSize(); }
  int32_t unk_id() const override { return processor_.unk_id(); }
  int32_t eos_id() const override { return processor_.eos_id(); }
  std::string piece(int32_t id) const override { return processor_.IdToPiece(id); }
  bool byte_fallback() const override {
    int bytes = 0;
    for (int i = 0; i < processor_.GetPieceSize(); ++i) bytes += processor_.IsByte(i) ? 1 : 0;
    return bytes == 256;
  }
  void encode_line(std::string_view line, std::vector<int32_t>* ids) const override {
    std::vector<int> out;
    const auto status = processor_.Encode(line, &out);
    MOE_CHECK(status.ok(), "SentencePiece Encode failed: ", status.ToString());
    ids->insert(ids->end(), out.begin(), out.end());
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    const auto status = processor_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    MOE_CHECK(status.ok(), "SentencePiece Decode failed: ", status.ToString());
    return text;
  }
  sentencepiece::SentencePieceProcessor processor_;
};

class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>* lines) : lines_(lines) {}
  bool done() const override { return i_ >= lines_->size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return (*lines_)[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>* lines_;
  size_t i_ = 0;
};

// SentencePiece's trainer logs to stderr line by line; the log is kept aside and shown only when
// training fails.
class QuietStderr {
 public:
  QuietStderr() {
    std::fflush(stderr);
    char name[] = "/tmp/momoe_spm_log_XXXXXX";
    fd_ = mkstemp(name);
    if (fd_ < 0) return;
    unlink(name);
    saved_ = dup(2);
    dup2(fd_, 2);
  }
  ~QuietStderr() { restore(); }
  std::string restore() {  // restores stderr; returns what was captured
    std::string log;
    if (fd_ < 0) return log;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    lseek(fd_, 0, SEEK_SET);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd_, buf, sizeof(buf))) > 0) log.append(buf, static_cast<size_t>(n));
    close(fd_);
    fd_ = -1;
    return log;
  }

 private:
  int fd_ = -1;
  int saved_ = -1;
};

class Backend final : public SentencePieceBackend {
 public:
  StatusOr<std::unique_ptr<SentencePieceModel>> load(const std::string& bytes,
                                                     const std::string& source) const override {
    auto model = std::make_unique<Model>();
    const auto status = model->processor_.LoadFromSerializedProto(bytes);
    if (!status.ok()) {
      return invalid_argument_error("SentencePiece model ", source,
                                    " does not load: ", status.ToString());
    }
    return std::unique_ptr<SentencePieceModel>(std::move(model));
  }

  StatusOr<std::string> train(const std::vector<std::string>& lines,
                              const SentencePieceOptions& options, int threads) const override {
    const std::unordered_map<std::string, std::string> args = {
        {"model_type", options.model_type},
        {"vocab_size", std::to_string(options.vocab_size)},
        {"byte_fallback", "true"},
        {"normalization_rule_name", "identity"},
        {"unk_id", "0"},
        {"eos_id", "1"},
        {"bos_id", "-1"},
        {"pad_id", "-1"},
        {"unk_piece", std::string(Vocabulary::kUnk)},
        {"eos_piece", std::string(Vocabulary::kEos)},
        // A control symbol: id 2 is reserved for the attack word, and never matched in text.
        {"control_symbols", std::string(Vocabulary::kAttack)},
        // Identity normalisation, and no whitespace folding either: decode gives the line back.
        {"remove_extra_whitespaces", "false"},
        {"input_sentence_size", "0"},
        {"shuffle_input_sentence", "false"},
        {"max_sentence_length", "1000000"},
        // The thread count is recorded in the model (and changes unigram's pieces): a fixed one,
        // so the same text and options give the same model on any machine.
        {"num_threads", "16"}};
    (void)threads;
    LineIterator it(&lines);
    std::string model;
    QuietStderr quiet;
    const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
    const std::string log = quiet.restore();
    if (!status.ok()) {
      return invalid_argument_error(
          "training the SentencePiece model failed: ", status.ToString(),
          log.empty() ? std::string()
                      : "\n" + log.substr(log.size() > 4000 ? log.size() - 4000 : 0));
    }
    return model;
  }
};

}  // namespace

void register_sentencepiece() {
  static const Backend backend;
  register_sentencepiece_backend(&backend);
}

}  // namespace moe::data
