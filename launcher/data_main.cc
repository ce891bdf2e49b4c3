// momoe-data: prepare a corpus once (tokenized into checksummed shards that training reads
// without loading them), check a prepared dataset, describe one; tokenize with a model's
// tokenizer as a filter.
//
//   momoe-data prepare --out data/mine --train corpus/ --valid valid.txt.zst --test test.txt
//   momoe-data prepare --out data/wt103 --wikitext wikitext-103/ --vocab-min-count 3
//   momoe-data prepare --out data/bpe --train corpus/ --tokenizer sentencepiece
//   momoe-data verify data/mycorpus
//   momoe-data info data/mycorpus
//   momoe-data tokenize --model data/bpe/tokenizer.model --encode < lines.txt
//   momoe-train --config configs/smoe.pbtxt --set data.dataset=data/mycorpus
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>

#include "base/logging.h"
#include "base/progress.h"
#include "core/data/dataset.h"
#include "core/data/prepare.h"
#include "core/data/text_reader.h"
#include "core/data/text_stream.h"
#include "core/data/tokenizer.h"
#include "io/crash_point.h"
#include "io/file_util.h"
#include "launcher/env_params.h"
#include "launcher/exit_status.h"
#include "launcher/flags.h"
#include "launcher/momoe_data_process.h"
#include "launcher/signals.h"
#if defined(MOMOE_HAVE_SENTENCEPIECE) && MOMOE_HAVE_SENTENCEPIECE
#include "core/data/sentencepiece_backend.h"
#endif

namespace moe {
namespace {

namespace fs = std::filesystem;

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

// "1,234,567".
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n);
  for (int at = static_cast<int>(digits.size()) - 3; at > (n < 0 ? 1 : 0); at -= 3) {
    digits.insert(static_cast<size_t>(at), ",");
  }
  return digits;
}

// A progress bar on stderr: redrawn in place on a terminal, a line every 5 s otherwise
// ($MOMOE_PROGRESS_SECONDS).
class ProgressBar {
 public:
  ProgressBar(const data::PrepareSpec& spec, double every)
      : tty_(isatty(2) != 0), sp_(spec.sp), every_(every) {}
  ~ProgressBar() { finish(); }

  bool update(const data::PrepareProgress& p) {
    if (p.phase == "sentencepiece") return update_sentencepiece(p);
    const auto now = std::chrono::steady_clock::now();
    if (p.phase != phase_) {
      finish();
      phase_ = p.phase;
      last_ = {};
    }
    const double since = std::chrono::duration<double>(now - last_).count();
    const bool done = p.bytes_done >= p.bytes_total;
    if (since >= every_ || done) {
      last_ = now;
      const double rate =
          p.seconds > 0 ? static_cast<double>(p.bytes_done - p.bytes_at_start) / p.seconds : 0;
      const double eta = rate > 0 ? static_cast<double>(p.bytes_total - p.bytes_done) / rate : NAN;
      const double pct = p.bytes_total > 0 ? 100.0 * static_cast<double>(p.bytes_done) /
                                                 static_cast<double>(p.bytes_total)
                                           : 100.0;
      char line[256];
      // Splits are tokenized in turn: the bar is over all of their input, 100% when all is done.
      std::snprintf(line, sizeof(line), "%s%s: %s / %s%s (%5.1f%%), %s/s%s, ETA %s",
                    p.phase == "vocabulary" ? "" : "tokenizing ", p.phase.c_str(),
                    human_bytes(static_cast<double>(p.bytes_done)).c_str(),
                    human_bytes(static_cast<double>(p.bytes_total)).c_str(),
                    p.phase == "vocabulary" ? "" : " of all input", pct, human_bytes(rate).c_str(),
                    p.tokens > 0 ? str_cat(", ", p.tokens, " tokens").c_str() : "",
                    format_duration(eta).c_str());
      std::fprintf(stderr, tty_ ? "\r%-100s" : "%s\n", line);
      open_ = tty_;
    }
    return stop_signal() == 0;
  }

  void finish() {
    if (open_) std::fprintf(stderr, "\n");
    open_ = false;
  }

 private:
  // Training a SentencePiece model: what can be observed of it (the lines read, then what the
  // trainer's log says: its sentences and the pieces it has so far), and the time it takes.
  bool update_sentencepiece(const data::PrepareProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (p.phase != phase_) {
      finish();
      phase_ = p.phase;
      last_ = now;
      return stop_signal() == 0;  // the first line after `every_` seconds
    }
    if (std::chrono::duration<double>(now - last_).count() < every_) return stop_signal() == 0;
    last_ = now;
    const data::SentencePieceTrainProgress& sp = p.sentencepiece;
    std::string line;
    if (!sp.training) {
      line = str_cat("sentencepiece: reading the training text: ", with_commas(sp.lines),
                     " lines so far");
    } else {
      line = str_cat(
          "sentencepiece: training the ", sp_.model_type, " model of ", with_commas(sp_.vocab_size),
          " pieces on ", sp.sentences > 0 ? with_commas(sp.sentences) + " sentences" : "the sample",
          sp.pieces > 0
              ? str_cat(": its log reports ", with_commas(sp.pieces),
                        sp_.model_type == "bpe" ? " pieces so far" : " pieces, pruning down")
              : "");
    }
    char elapsed[32];
    std::snprintf(elapsed, sizeof(elapsed), "%.1f s", p.seconds);
    line += str_cat(", ", p.seconds < 60 ? std::string(elapsed) : format_duration(p.seconds),
                    " elapsed");
    std::fprintf(stderr, tty_ ? "\r%-110s" : "%s\n", line.c_str());
    open_ = tty_;
    return stop_signal() == 0;
  }

  bool tty_;
  data::SentencePieceOptions sp_;
  double every_;  // seconds between lines (redraws on a terminal)
  bool open_ = false;
  std::string phase_;
  std::chrono::steady_clock::time_point last_{};
};

// WikiText-103 / WikiText-2 as published: wiki.{train,valid,test}.tokens (tokenized), or the
// .raw files (untokenized text) with --raw. <unk> stays a word (it maps to the <unk> id).
Status add_wikitext(const std::string& dir, bool raw, data::PrepareSpec* spec) {
  const std::string ext = raw ? ".raw" : ".tokens";
  for (auto [name, list] : {std::pair{"train", &spec->train}, std::pair{"valid", &spec->valid},
                            std::pair{"test", &spec->test}}) {
    const std::string path = (fs::path(dir) / str_cat("wiki.", name, ext)).string();
    if (!fs::exists(path)) {
      return not_found_error("--wikitext ", dir, ": no ", path,
                             " (the WikiText layout has wiki.train", ext, ", wiki.valid", ext,
                             " and wiki.test", ext, raw ? "" : "; --raw reads the .raw files", ")");
    }
    if (!list->empty()) {
      return invalid_argument_error("--wikitext gives the ", name, " split; do not also pass --",
                                    name);
    }
    list->push_back(path);
  }
  return Status::OK();
}

// The flags of `momoe-data prepare`, read and checked: what to prepare and how to report it.
struct PrepareOptions {
  data::PrepareSpec spec;
  bool quiet = false;
};

// Declares the flags of `momoe-data prepare`.
void define_prepare_flags(FlagParser* flags) {
  flags->value(
      "out", "the dataset folder to write (new or empty; or an interrupted preparation to resume)");
  flags->value("train", "training text: a file (plain, .gz, .zst) or a folder of them; repeatable",
               true);
  flags->value("valid", "validation text (as --train); repeatable", true);
  flags->value("test", "test text (as --train); repeatable", true);
  flags->value("wikitext", "a WikiText folder: wiki.{train,valid,test}.tokens");
  flags->switch_flag("raw", "with --wikitext: read the wiki.*.raw files instead");
  flags->value("tokenizer", "word (default) or sentencepiece");
  flags->value("sp-model",
               "sentencepiece: an existing .model file (default: train one on --train)");
  flags->value("sp-type", "sentencepiece: bpe (default) or unigram, when training one");
  flags->value("sp-vocab-size", "sentencepiece: pieces when training one (default 8000)");
  flags->value("sp-max-sentences",
               "sentencepiece: lines to train on, an even sample (default 1000000; 0: all)");
  flags->value("vocab-max-size",
               "word: vocabulary size including the 3 special tokens (default 0: no cap)");
  flags->value("vocab-min-count", "word: words seen fewer times in train become <unk> (default 1)");
  flags->value("vocab", "word: use this saved vocabulary (a vocab.txt) instead of building one");
  flags->value("threads", "tokenizing threads (default: every core)");
  flags->value("shard-tokens",
               "a shard closes once it holds this many tokens, at the end of the chunk that "
               "reaches them (so every shard but a split's last holds at least that many, and a "
               "split of less text than one --chunk-mb chunk is one shard; default 67108864 = "
               "256 MB)");
  flags->value("chunk-mb",
               "MB of text per tokenizing chunk, the step at which shards close (default 16)");
  flags->switch_flag("quiet", "no progress bar and summary (errors still show)");
}

// Refuses tokenizer flags that do not go with the chosen tokenizer or with each other.
Status check_tokenizer_flags(const FlagParser& flags, const data::PrepareSpec& spec) {
  const bool sp_flags = flags.has("sp-model") || flags.has("sp-type") ||
                        flags.has("sp-vocab-size") || flags.has("sp-max-sentences");
  if (spec.tokenizer == "word" && sp_flags) {
    return invalid_argument_error("--sp-* flags go with --tokenizer sentencepiece");
  }
  if (spec.tokenizer == "sentencepiece" &&
      (flags.has("vocab") || flags.has("vocab-max-size") || flags.has("vocab-min-count"))) {
    return invalid_argument_error(
        "--vocab, --vocab-max-size and --vocab-min-count go with the word tokenizer; "
        "a SentencePiece model's size is --sp-vocab-size");
  }
  if (!spec.sp_model_path.empty() &&
      (flags.has("sp-type") || flags.has("sp-vocab-size") || flags.has("sp-max-sentences"))) {
    return invalid_argument_error(
        "--sp-model uses an existing model: --sp-type, --sp-vocab-size and "
        "--sp-max-sentences do not apply");
  }
  if (!spec.vocab_path.empty() && (flags.has("vocab-max-size") || flags.has("vocab-min-count"))) {
    return invalid_argument_error(
        "--vocab uses a saved vocabulary: --vocab-max-size and --vocab-min-count do not apply");
  }
  return Status::OK();
}

// Reads the parsed flags of `momoe-data prepare` into its options, refusing bad combinations.
StatusOr<PrepareOptions> read_prepare_flags(const FlagParser& flags) {
  PrepareOptions options;
  data::PrepareSpec& spec = options.spec;
  spec.out_dir = flags.get("out");
  spec.train = flags.get_all("train");
  spec.valid = flags.get_all("valid");
  spec.test = flags.get_all("test");
  if (flags.has("wikitext")) {
    MOE_RETURN_IF_ERROR(add_wikitext(flags.get("wikitext"), flags.has("raw"), &spec));
  } else if (flags.has("raw")) {
    return invalid_argument_error("--raw goes with --wikitext");
  }
  spec.vocab_path = flags.get("vocab");
  MOE_ASSIGN_OR_RETURN(const int64_t max_size, flags.get_int("vocab-max-size", 0));
  MOE_ASSIGN_OR_RETURN(const int64_t min_count, flags.get_int("vocab-min-count", 1));
  MOE_ASSIGN_OR_RETURN(const int64_t threads, flags.get_int("threads", 0));
  MOE_ASSIGN_OR_RETURN(const int64_t shard, flags.get_int("shard-tokens", spec.shard_tokens));
  MOE_ASSIGN_OR_RETURN(const int64_t chunk, flags.get_int("chunk-mb", 16));
  MOE_ASSIGN_OR_RETURN(const int64_t sp_vocab, flags.get_int("sp-vocab-size", spec.sp.vocab_size));
  MOE_ASSIGN_OR_RETURN(const int64_t sp_sentences,
                       flags.get_int("sp-max-sentences", spec.sp.max_sentences));
  spec.tokenizer = flags.get("tokenizer", "word");
  spec.sp_model_path = flags.get("sp-model");
  spec.sp.model_type = flags.get("sp-type", "bpe");
  spec.sp.vocab_size = sp_vocab;
  spec.sp.max_sentences = sp_sentences;
  MOE_RETURN_IF_ERROR(check_tokenizer_flags(flags, spec));
  if (threads < 0 || threads > 4096) {
    return invalid_argument_error("--threads ", threads, " must be in [0, 4096]");
  }
  if (chunk < 1 || chunk > 4096) {
    return invalid_argument_error("--chunk-mb ", chunk, " must be in [1, 4096]");
  }
  spec.vocab.max_size = max_size;
  spec.vocab.min_count = min_count;
  spec.threads = static_cast<int>(threads);
  spec.shard_tokens = shard;
  spec.chunk_bytes = chunk << 20;
  options.quiet = flags.has("quiet");
  return options;
}

// Above this many words, an uncapped word vocabulary is warned about: a model's token embedding
// and output head grow with it (116,481 words of a 52 MB corpus made a small model 97%
// embedding), and words seen once or twice teach it little.
constexpr int64_t kUncappedVocabularyWarning = 32000;

// Warns (stderr, even with --quiet) when prepare built an uncapped word vocabulary larger than
// kUncappedVocabularyWarning.
void warn_uncapped_vocabulary(const data::PrepareSpec& spec, const data::DatasetIndex& index) {
  if (index.tokenizer != "word" || !spec.vocab_path.empty() || spec.vocab.max_size != 0 ||
      index.vocab_size <= kUncappedVocabularyWarning) {
    return;
  }
  std::fprintf(stderr,
               "momoe-data: warning: the word vocabulary is uncapped: %s words (every word seen "
               "%lld time(s) or more). A model's token embedding and output head grow with it and "
               "can outweigh the rest of the model; prepare again with --vocab-max-size N (e.g. "
               "%lld) or a higher --vocab-min-count to cap it\n",
               with_commas(index.vocab_size).c_str(), static_cast<long long>(spec.vocab.min_count),
               static_cast<long long>(kUncappedVocabularyWarning));
}

// Prints what `momoe-data prepare` wrote: the tokenizer and each split, then how to train on it.
void print_prepare_summary(const data::PrepareSpec& spec, const data::DatasetIndex& index,
                           double seconds) {
  std::printf("momoe-data: %s ready in %s: %s tokenizer of %lld tokens", spec.out_dir.c_str(),
              format_duration(seconds).c_str(), index.tokenizer.c_str(),
              static_cast<long long>(index.vocab_size));
  for (const auto& [name, s] : index.splits) {
    std::printf(
        "; %s %lld tokens (%s of text, %.2f%% <unk>) in %zu shard(s)", name.c_str(),
        static_cast<long long>(s.tokens), human_bytes(static_cast<double>(s.stats.bytes)).c_str(),
        s.tokens > 0 ? 100.0 * static_cast<double>(s.stats.unknown) / static_cast<double>(s.tokens)
                     : 0.0,
        s.shards.size());
  }
  std::printf("\n");
  if (std::getenv("MOMOE_DATA_CALLER") == nullptr) {
    std::printf("train on it with: momoe-train --config CONFIG --set data.dataset=%s\n",
                spec.out_dir.c_str());
  }
}

// Prepares the dataset (stoppable by a signal, exit kExitStopped) and reports it unless quiet.
int run_prepare(const PrepareOptions& options) {
  install_stop_signal_handlers(
      "stopping within a second; every shard written so far is kept, and the same command "
      "continues from there",
      "stopping now; the same command continues from the last resume point");
  const auto t0 = std::chrono::steady_clock::now();
  const bool quiet = options.quiet;
  ProgressBar bar(options.spec, progress_interval_seconds(isatty(2) != 0 ? 0.25 : 5.0));
  data::PrepareSpec spec = options.spec;
  spec.stop_requested = [] { return stop_signal() != 0; };  // asked while tokenizing, too
  StatusOr<data::DatasetIndex> index = data::prepare_dataset(
      spec,
      [&](const data::PrepareProgress& p) { return quiet ? stop_signal() == 0 : bar.update(p); });
  bar.finish();
  if (!index.ok()) {
    if (index.status().code() == StatusCode::kAborted && stop_signal() != 0) {
      log_error(index.status().message());
      return kExitStopped;
    }
    return exit_with(index.status());
  }
  warn_uncapped_vocabulary(options.spec, *index);
  if (quiet) return 0;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_prepare_summary(options.spec, *index, seconds);
  return 0;
}

// `momoe-data prepare`: tokenizes text into a dataset folder.
int prepare(int argc, char** argv) {
  FlagParser flags(
      "usage: momoe-data prepare --out DIR (--train PATH... [--valid PATH] [--test PATH] | "
      "--wikitext DIR) [flags]\n",
      "\nexample: momoe-data prepare --out data/brown --train data/brown/train.txt.gz --valid "
      "data/brown/valid.txt.gz --test data/brown/test.txt.gz --vocab-max-size 10000\n");
  define_prepare_flags(&flags);
  if (std::optional<int> code = flags.parse_or_exit_code(argc, argv)) return *code;
  StatusOr<PrepareOptions> options = read_prepare_flags(flags);
  if (!options.ok()) return exit_with(options.status());
  // Fault injection (the resume tests): a SIGKILL at the n-th rename of prepare.json or a shard.
  for (auto param : {env::crash_at, env::crash_trace}) {
    if (!param().ok()) return exit_with(param().status());
  }
  io::set_crash_at(*env::crash_at());
  io::set_crash_trace(*env::crash_trace() != 0);
  return run_prepare(*options);
}

// `momoe-data info`: the tokenizer, where it came from, and each split with every file it holds.
void print_info(const std::string& dir, const data::DatasetIndex& index) {
  // The index records the first training file as the origin of a vocabulary (or model) built from
  // the training split: it came from every file of that split, listed below.
  const auto train = index.splits.find("train");
  const bool from_train = train != index.splits.end() && !train->second.sources.empty() &&
                          index.vocab_from == train->second.sources.front();
  const std::string from = from_train
                               ? str_cat("built from the train split's ",
                                         train->second.sources.size(), " file(s), listed below")
                               : str_cat("from ", index.vocab_from);
  std::printf("dataset %s: tokenizer %s of %lld tokens (%s)\n", dir.c_str(),
              index.tokenizer.c_str(), static_cast<long long>(index.vocab_size), from.c_str());
  for (const auto& [name, s] : index.splits) {
    std::printf(
        "  %-5s %lld tokens, %lld words, %s of text, %.2f%% <unk>, %zu shard(s), %zu file(s):\n",
        name.c_str(), static_cast<long long>(s.tokens), static_cast<long long>(s.stats.words),
        human_bytes(static_cast<double>(s.stats.bytes)).c_str(),
        s.tokens > 0 ? 100.0 * static_cast<double>(s.stats.unknown) / static_cast<double>(s.tokens)
                     : 0.0,
        s.shards.size(), s.sources.size());
    for (const std::string& source : s.sources) std::printf("        %s\n", source.c_str());
  }
}

int verify_or_info(const std::string& cmd, int argc, char** argv) {
  FlagParser flags(
      str_cat("usage: momoe-data ", cmd, " DIR\n",
              cmd == "verify" ? "  checks every shard's checksum and ids, and the index's contents "
                                "fingerprints\n"
                              : "  prints what the dataset holds (from its index)\n"),
      str_cat("\nexample: momoe-data ", cmd, " data/brown\n"));
  if (std::optional<int> code = flags.parse_or_exit_code(argc, argv)) return *code;
  if (flags.positional().size() != 1) {
    return exit_with(invalid_argument_error("momoe-data ", cmd, " takes one dataset folder"));
  }
  const std::string dir = flags.positional()[0];
  if (cmd == "verify") {
    StatusOr<std::string> r = data::verify_dataset(dir);
    if (!r.ok()) return exit_with(r.status());
    std::printf("%s\n", r->c_str());
    return 0;
  }
  StatusOr<data::DatasetIndex> index = data::read_dataset_index(dir);
  if (!index.ok()) return exit_with(index.status());
  print_info(dir, *index);
  return 0;
}

// `momoe-data tokenize`: the tokenizer of a model as a line-oriented filter, for processes that
// cannot load SentencePiece (momoe-generate; the protocol is in launcher/momoe_data_process.h).
StatusOr<std::shared_ptr<const data::Tokenizer>> load_tokenizer(const std::string& path) {
  if (path.size() >= 4 && path.compare(path.size() - 4, 4, ".txt") == 0) {
    MOE_ASSIGN_OR_RETURN(data::Vocabulary vocab, data::Vocabulary::load(path));
    return data::Tokenizer::word(std::move(vocab));
  }
  MOE_ASSIGN_OR_RETURN(std::string bytes, io::read_file(path));
  return data::Tokenizer::sentencepiece(std::move(bytes), path);
}

Status tokenize_lines(const data::Tokenizer& tokenizer, bool encode) {
  struct LineBuffer {  // getline(3)'s buffer
    char* data = nullptr;
    size_t capacity = 0;
    ~LineBuffer() { std::free(data); }
  } buffer;
  int64_t line_number = 0;
  ssize_t n = 0;
  while ((n = ::getline(&buffer.data, &buffer.capacity, stdin)) >= 0) {
    ++line_number;
    std::string_view line(buffer.data, static_cast<size_t>(n));
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    const std::string where = str_cat("line ", line_number, " of the input");
    std::string answer;
    if (encode) {
      MOE_RETURN_IF_ERROR(data::validate_utf8(line, where));
      for (const int32_t id : tokenizer.encode(line)) {
        if (!answer.empty()) answer += ' ';
        answer += std::to_string(id);
      }
    } else {
      std::vector<int32_t> ids;
      std::string token;
      std::istringstream in{std::string(line)};
      while (in >> token) {
        char* end = nullptr;
        errno = 0;
        const long long id = std::strtoll(token.c_str(), &end, 10);
        if (*end != '\0' || errno != 0 || id < 0 || id >= tokenizer.size()) {
          return invalid_argument_error(where, ": '", token, "' is not an id of the ",
                                        tokenizer.describe(), " (0 to ", tokenizer.size() - 1, ")");
        }
        ids.push_back(static_cast<int32_t>(id));
      }
      answer = data::escape_line(tokenizer.decode(ids));
    }
    answer += '\n';
    if (std::fwrite(answer.data(), 1, answer.size(), stdout) != answer.size() ||
        std::fflush(stdout) != 0) {
      return internal_error("writing to stdout: ", std::strerror(errno));
    }
  }
  if (std::ferror(stdin)) return internal_error("reading stdin: ", std::strerror(errno));
  return Status::OK();
}

int tokenize(int argc, char** argv) {
  FlagParser flags(
      "usage: momoe-data tokenize --model FILE (--encode | --decode) [flags]\n"
      "  a line-oriented filter on stdin/stdout (one answer line per line, flushed), used by\n"
      "  momoe-generate for SentencePiece checkpoints\n",
      "example: echo 'The jury said' | momoe-data tokenize --model "
      "runs/sp/ckpt-00000300/tokenizer.model --encode\n");
  flags.value("model", "a SentencePiece model (tokenizer.model) or a word vocabulary (vocab.txt)");
  flags.switch_flag("encode",
                    "each line of text in -> its ids out (space-separated; the last one "
                    "is the end-of-line id; an empty line for a blank one)");
  flags.switch_flag("decode",
                    "each line of ids in -> their text out, on one line ('\\' written "
                    "as \\\\, newlines as \\n)");
  flags.value("fingerprint",
              "refuse a model whose fingerprint is not this one (0x and 16 hex "
              "digits, as tokenizer.json records it)");
  if (std::optional<int> code = flags.parse_or_exit_code(argc, argv)) return *code;
  if (!flags.has("model") || flags.has("encode") == flags.has("decode")) {
    return exit_with(invalid_argument_error(
        "momoe-data tokenize needs --model FILE and one of --encode, --decode"));
  }
  const std::string path = flags.get("model");
  StatusOr<std::shared_ptr<const data::Tokenizer>> tokenizer = load_tokenizer(path);
  if (!tokenizer.ok()) return exit_with(tokenizer.status());
  if (flags.has("fingerprint")) {
    const std::string want = flags.get("fingerprint");
    char* end = nullptr;
    errno = 0;
    const unsigned long long f = std::strtoull(want.c_str(), &end, 16);
    if (want.empty() || *end != '\0' || errno != 0) {
      return exit_with(invalid_argument_error("--fingerprint ", want, " is not a hex number"));
    }
    if (f != (*tokenizer)->fingerprint()) {
      return exit_with(data_loss_error(path, " has fingerprint ",
                                       io::hex64((*tokenizer)->fingerprint()), ", not ", want,
                                       ": it was replaced or damaged"));
    }
  }
  const Status done = tokenize_lines(**tokenizer, flags.has("encode"));
  if (!done.ok()) return exit_with(done);
  return 0;
}

int run(int argc, char** argv) {
  const std::string usage =
      "usage: momoe-data COMMAND [flags]\n"
      "  prepare   tokenize text into a dataset folder (momoe-data prepare --help)\n"
      "  verify    check a dataset's checksums\n"
      "  info      describe a dataset\n"
      "  tokenize  a model's tokenizer as a filter: text to ids, ids to text\n"
      "example: momoe-data prepare --out data/brown --train data/brown/train.txt.gz "
      "--valid data/brown/valid.txt.gz --test data/brown/test.txt.gz\n";
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::printf("%s", usage.c_str());
    return argc < 2 ? kExitUserError : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "prepare") return prepare(argc - 1, argv + 1);
  if (cmd == "verify" || cmd == "info") return verify_or_info(cmd, argc - 1, argv + 1);
  if (cmd == "tokenize") return tokenize(argc - 1, argv + 1);
  return exit_with(invalid_argument_error("unknown command '", cmd, "'; ", usage));
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) {
#if defined(MOMOE_HAVE_SENTENCEPIECE) && MOMOE_HAVE_SENTENCEPIECE
  moe::data::register_sentencepiece();
#endif
  return moe::run(argc, argv);
}
