#include "core/data/sentencepiece_backend.h"

#include <fcntl.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// An unlinked temporary file (its descriptor only), removed whatever happens.
class TempFile {
 public:
  TempFile() {
    char name[] = "/tmp/momoe_spm_XXXXXX";
    fd_ = mkstemp(name);
    if (fd_ >= 0) unlink(name);
  }
  ~TempFile() {
    if (fd_ >= 0) close(fd_);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  // Bytes [from, end of file).
  std::string read_from(int64_t from) const {
    std::string out;
    char buf[1 << 16];
    ssize_t n;
    while ((n = pread(fd_, buf, sizeof(buf), static_cast<off_t>(from + out.size()))) > 0) {
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

 private:
  int fd_ = -1;
};

// The trainer's progress from its log (stderr): "Loaded all N sentences", then lines with
// " size=N" (bpe: "Added: freq=.. size=N ..."; unigram: "EM sub_iter=.. size=N ...").
void parse_log_line(const std::string& line, SentencePieceTrainProgress* p) {
  const auto number_after = [&](const char* key, int64_t* out) {
    const size_t at = line.find(key);
    if (at == std::string::npos) return;
    const char* digits = line.c_str() + at + std::strlen(key);
    if (*digits >= '0' && *digits <= '9') *out = std::strtoll(digits, nullptr, 10);
  };
  number_after("Loaded all ", &p->sentences);
  if (line.find("Added:") != std::string::npos || line.find("sub_iter=") != std::string::npos) {
    number_after(" size=", &p->pieces);
  }
}

// Runs the trainer in a child process: the library has no progress callback and cannot be
// interrupted, and a stop must end it at once. The child's stderr (the trainer's log) goes to
// `log`, which the parent reads for progress; the model goes to `model`.
[[noreturn]] void train_in_child(const std::unordered_map<std::string, std::string>& args,
                                 const std::vector<std::string>& lines, int log_fd, int model_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the preparation
  dup2(log_fd, 2);
  LineIterator it(&lines);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  if (!status.ok()) {
    std::fprintf(stderr, "\nmomoe: %s\n", status.ToString().c_str());
    std::fflush(stderr);
    _exit(1);
  }
  for (size_t at = 0; at < model.size();) {
    const ssize_t n = write(model_fd, model.data() + at, model.size() - at);
    if (n <= 0) _exit(1);
    at += static_cast<size_t>(n);
  }
  _exit(0);
}

// Waits for the child training a model, reporting its progress; kills it when the monitor says
// stop. Returns the child's wait status.
StatusOr<int> watch_child(pid_t pid, const TempFile& log, const SentencePieceMonitor& monitor) {
  const auto t0 = std::chrono::steady_clock::now();
  SentencePieceTrainProgress progress;
  progress.training = true;
  int64_t read = 0;
  std::string partial;
  while (true) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) return internal_error("waitpid: ", std::strerror(errno));
    const std::string more = log.read_from(read);
    read += static_cast<int64_t>(more.size());
    partial += more;
    for (size_t nl; (nl = partial.find('\n')) != std::string::npos; partial.erase(0, nl + 1)) {
      parse_log_line(partial.substr(0, nl), &progress);
    }
    progress.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (monitor && !monitor(progress)) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return aborted_error(
          "stopped while training the SentencePiece model (nothing of it is kept)");
    }
    usleep(100 * 1000);
  }
}

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
                              const SentencePieceOptions& options, int threads,
                              const SentencePieceMonitor& monitor) const override {
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
    TempFile log, model;
    if (log.fd() < 0 || model.fd() < 0) {
      return internal_error("cannot create a temporary file in /tmp: ", std::strerror(errno));
    }
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0)
      return internal_error("cannot start the SentencePiece trainer: fork: ", std::strerror(errno));
    if (pid == 0) train_in_child(args, lines, log.fd(), model.fd());
    MOE_ASSIGN_OR_RETURN(const int status, watch_child(pid, log, monitor));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      // Its log is shown only when training fails.
      const std::string text = log.read_from(0);
      return invalid_argument_error(
          "training the SentencePiece model failed (the trainer ",
          WIFEXITED(status) ? str_cat("exited ", WEXITSTATUS(status))
                            : str_cat("was killed by signal ", WTERMSIG(status)),
          ")",
          text.empty() ? std::string()
                       : "\n" + text.substr(text.size() > 4000 ? text.size() - 4000 : 0));
    }
    return model.read_from(0);
  }
};

}  // namespace

void register_sentencepiece() {
  static const Backend backend;
  register_sentencepiece_backend(&backend);
}

}  // namespace moe::data
