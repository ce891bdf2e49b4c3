// momoe-generate: text sampled from a checkpoint, printed token by token as it is sampled.
//
//   momoe-generate --checkpoint runs/quickstart/ckpt-00000300 --prompt "The jury said"
//       [--max-tokens 50] [--temperature 0.8] [--top-k 40] [--top-p 0.95] [--seed 1]
//
// stdout holds the text alone (the prompt as the model reads it, then the generated tokens); the
// progress and diagnostics go to stderr. The same flags give the same text on any thread count
// and on any machine that computes the same logits (a GPU's, or those of a CPU with another BLAS
// kernel, may differ in the last bits): every token is picked on the host in double precision
// (core/inference/sampling.h) with one counter-based draw keyed by the seed and the token's
// position (base/rng.h).
//
// The model reads a fixed seq_len of tokens with learned (or rotary) positions and causal
// attention: each step runs the last <= seq_len tokens as one sequence, padded on the right
// (kPadId), and samples from the logits of its last real position.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/rng.h"
#include "core/data/text_reader.h"
#include "core/data/tokenizer.h"
#include "core/inference/sampling.h"
#include "io/file_util.h"
#include "launcher/device_flags.h"
#include "launcher/exit_status.h"
#include "launcher/flags.h"
#include "launcher/momoe_data_process.h"

namespace moe {
namespace {

using Ids = std::vector<int32_t>;

// The unknown words a refused prompt lists at most.
constexpr size_t kMaxListedWords = 20;

// Writes to stdout at once (the text streams).
void emit(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// The text of ids as they are sampled. Lines before the last end-of-line id are final; the
// current line is decoded again as a whole at every token, and what of it was not printed yet is
// printed. (A SentencePiece piece's text can depend on its neighbours: byte-fallback pieces of a
// character not yet complete decode to U+FFFD, which is held back until the rest of it comes.
// Printed text is never taken back: should a line's decoding stop extending what was printed,
// printing goes on once it is longer again.)
class TextStream {
 public:
  using Decode = std::function<StatusOr<std::string>(const Ids&)>;
  TextStream(Decode decode, int32_t eos_id) : decode_(std::move(decode)), eos_id_(eos_id) {}

  // Prints the prompt; `empty_prompt`: its one end-of-line id stands for no text.
  Status start(const Ids& prompt, bool empty_prompt) {
    if (empty_prompt) return Status::OK();
    const auto last_eos = std::find(prompt.rbegin(), prompt.rend(), eos_id_).base();
    const Ids done(prompt.begin(), last_eos);
    line_.assign(last_eos, prompt.end());
    MOE_ASSIGN_OR_RETURN(const std::string head, decode_(done));
    MOE_ASSIGN_OR_RETURN(printed_, decode_(line_));
    emit(head + printed_);
    ends_with_newline_ = printed_.empty() && (head.empty() || head.back() == '\n');
    return Status::OK();
  }

  Status add(int32_t id) {
    if (id == eos_id_) {
      MOE_RETURN_IF_ERROR(print_line(/*hold_back=*/false));
      emit("\n");
      line_.clear();
      printed_.clear();
      ends_with_newline_ = true;
      return Status::OK();
    }
    line_.push_back(id);
    return print_line(/*hold_back=*/true);
  }

  // The rest of the line, and a newline unless the text ends with one.
  Status finish() {
    MOE_RETURN_IF_ERROR(print_line(/*hold_back=*/false));
    if (!ends_with_newline_) emit("\n");
    return Status::OK();
  }

 private:
  Status print_line(bool hold_back) {
    MOE_ASSIGN_OR_RETURN(std::string text, decode_(line_));
    static const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD
    while (hold_back && text.size() >= kReplacement.size() &&
           text.compare(text.size() - kReplacement.size(), kReplacement.size(), kReplacement) ==
               0) {
      text.resize(text.size() - kReplacement.size());
    }
    if (text.size() <= printed_.size()) return Status::OK();
    if (!starts_with(text, printed_)) {
      log_warning("momoe-generate: the decoding of the current line changed text already printed");
    }
    emit(text.substr(printed_.size()));
    ends_with_newline_ = text.back() == '\n';
    printed_ = std::move(text);
    return Status::OK();
  }

  Decode decode_;
  int32_t eos_id_;
  Ids line_;             // the ids of the current line
  std::string printed_;  // its text printed so far
  bool ends_with_newline_ = true;
};

// The words of a prompt the word vocabulary does not know, in order of first use.
std::vector<std::string> unknown_words(const std::string& prompt, const data::Vocabulary& vocab) {
  std::vector<std::string> unknown;
  data::for_each_token(prompt, [&](std::string_view token) {
    if (!vocab.contains(token) &&
        std::find(unknown.begin(), unknown.end(), token) == unknown.end()) {
      unknown.emplace_back(token);
    }
  });
  return unknown;
}

struct PromptIds {
  Ids ids;
  bool empty = false;  // the prompt has no token: ids is the end-of-line id alone
};

// The prompt's ids. The tokenizer ends every line of text with the end-of-line id; the prompt's
// last line is continued, so its end-of-line id is dropped unless the prompt ends with a newline.
// An empty prompt (or one of only whitespace) is the end-of-line id alone: generation starts a
// line, as after any line of the training text.
StatusOr<PromptIds> tokenize_prompt(const std::string& prompt, const data::Tokenizer& tokenizer,
                                    data::TokenizeProcess* encoder, bool allow_unknown) {
  Ids ids;
  if (tokenizer.kind() == data::Tokenizer::Kind::kWord) {
    const std::vector<std::string> unknown = unknown_words(prompt, tokenizer.vocabulary());
    if (!unknown.empty() && !allow_unknown) {
      std::string list;
      for (size_t i = 0; i < std::min(unknown.size(), kMaxListedWords); ++i) {
        list += str_cat(i > 0 ? ", " : "", "\"", unknown[i], "\"");
      }
      if (unknown.size() > kMaxListedWords) {
        list += str_cat(" and ", unknown.size() - kMaxListedWords, " more");
      }
      return invalid_argument_error("the prompt has ", unknown.size(), " word(s) the checkpoint's ",
                                    tokenizer.describe(), " does not know: ", list,
                                    " (the vocabulary is case-sensitive; pass --allow-unknown to "
                                    "read them as <unk>)");
    }
    ids = tokenizer.encode(prompt);
  } else {
    size_t begin = 0;
    while (begin < prompt.size()) {
      const size_t end = std::min(prompt.find('\n', begin), prompt.size());
      MOE_ASSIGN_OR_RETURN(const Ids line, encoder->encode_line(std::string_view(prompt).substr(
                                               begin, end - begin)));
      ids.insert(ids.end(), line.begin(), line.end());
      begin = end + 1;
    }
    const int64_t unknown = std::count(ids.begin(), ids.end(), tokenizer.unk_id());
    if (unknown > 0 && !allow_unknown) {
      return invalid_argument_error("the prompt has text the checkpoint's ", tokenizer.describe(),
                                    " cannot encode: ", unknown,
                                    " <unk> piece(s) (pass --allow-unknown to keep them as <unk>)");
    }
  }
  PromptIds out;
  out.empty = ids.empty();
  // A prompt whose last line is blank (it ends with a newline, maybe then spaces) ends a line.
  const size_t last_newline = prompt.rfind('\n');
  const bool ends_line =
      last_newline != std::string::npos &&
      prompt.find_first_not_of(" \t\r\f\v", last_newline + 1) == std::string::npos;
  if (!ids.empty() && ids.back() == tokenizer.eos_id() && !ends_line) ids.pop_back();
  if (ids.empty()) ids.push_back(tokenizer.eos_id());
  out.ids = std::move(ids);
  return out;
}

StatusOr<std::string> read_prompt(const FlagParser& flags) {
  if (flags.has("prompt") && flags.has("prompt-file")) {
    return invalid_argument_error("pass --prompt TEXT or --prompt-file FILE, not both");
  }
  std::string prompt;
  std::string source = "--prompt";
  if (flags.has("prompt-file")) {
    source = flags.get("prompt-file");
    MOE_ASSIGN_OR_RETURN(prompt, io::read_file(source));
  } else {
    prompt = flags.get("prompt");
  }
  MOE_RETURN_IF_ERROR(data::validate_utf8(prompt, source));
  return prompt;
}

// The padding after the last real token of a sequence shorter than seq_len: the end-of-line id,
// which every tokenizer has. Causal attention keeps it from every earlier position, so it does
// not change their logits, with one exception: the MoE layers route the padding tokens too, so an
// AC router's per-batch statistics (and a capacity limit at evaluation, eval_capacity_factor > 0)
// see them. A fixed id keeps that deterministic.
int32_t pad_id(const data::Tokenizer& tokenizer) { return tokenizer.eos_id(); }

// Everything the flags say, checked before the checkpoint is read.
struct GenerateOptions {
  SamplingOptions sampling;
  int64_t max_tokens = 0;
  int64_t seed = 0;
  std::string prompt;
  bool allow_unknown = false;
  bool print_ids = false;  // --ids
};

// Reads and checks the flags of the generation (the checkpoint's aside).
StatusOr<GenerateOptions> read_generate_options(const FlagParser& flags) {
  GenerateOptions o;
  MOE_ASSIGN_OR_RETURN(o.sampling.temperature, flags.get_double("temperature", 1.0));
  MOE_ASSIGN_OR_RETURN(o.sampling.top_k, flags.get_int("top-k", 0));
  MOE_ASSIGN_OR_RETURN(o.sampling.top_p, flags.get_double("top-p", 1.0));
  MOE_RETURN_IF_ERROR(validate(o.sampling));
  MOE_ASSIGN_OR_RETURN(o.max_tokens, flags.get_int("max-tokens", 50));
  if (o.max_tokens < 0 || o.max_tokens > 1000000) {
    return invalid_argument_error("--max-tokens ", o.max_tokens, " must be in [0, 1000000]");
  }
  MOE_ASSIGN_OR_RETURN(o.seed, flags.get_int("seed", 0));
  if (o.seed < 0) return invalid_argument_error("--seed ", o.seed, " must be >= 0");
  MOE_ASSIGN_OR_RETURN(o.prompt, read_prompt(flags));
  o.allow_unknown = flags.has("allow-unknown");
  o.print_ids = flags.has("ids");
  return o;
}

// How the checkpoint's text is tokenized: in this process, or for a SentencePiece checkpoint by
// `momoe-data tokenize` children (data/tokenizer.h says why). `decode` may use `decoder`: it stays
// where it is.
struct CheckpointTokenizer {
  std::unique_ptr<data::TokenizeProcess> encoder, decoder;
  TextStream::Decode decode;
};

// Starts the tokenizer children a SentencePiece checkpoint needs (before the weights fill memory).
Status start_tokenizer(const CheckpointModel& ckpt, CheckpointTokenizer* out) {
  const data::Tokenizer& tokenizer = *ckpt.tokenizer;
  out->decode = [&tokenizer](const Ids& ids) -> StatusOr<std::string> {
    return tokenizer.decode(ids);
  };
  if (!tokenizer.can_encode()) {
    const std::string model_path = ckpt.dir + "/" + data::kSentencePieceModelFile;
    MOE_ASSIGN_OR_RETURN(
        out->encoder, data::TokenizeProcess::start(model_path, data::TokenizeProcess::Mode::kEncode,
                                                   tokenizer.fingerprint()));
    MOE_ASSIGN_OR_RETURN(
        out->decoder, data::TokenizeProcess::start(model_path, data::TokenizeProcess::Mode::kDecode,
                                                   tokenizer.fingerprint()));
    out->decode = [out](const Ids& ids) { return out->decoder->decode(ids); };
  }
  return Status::OK();
}

// Samples --max-tokens tokens after the prompt, streaming their text: the prompt's ids and the
// sampled ones. `t0`: when sampling began.
StatusOr<Ids> sample_tokens(const CheckpointModel& ckpt, const GenerateOptions& o,
                            const Ids& prompt_ids, TextStream* stream,
                            std::chrono::steady_clock::time_point* t0) {
  const data::Tokenizer& tokenizer = *ckpt.tokenizer;
  TransformerLM* model = ckpt.model.get();
  const int64_t seq_len = ckpt.cfg.model.seq_len;
  const int64_t vocab = tokenizer.size();
  const CounterRng rng{static_cast<uint64_t>(o.seed), make_stream(RngTag::kSampling, 0, 0)};
  StepContext step;
  step.batch = 1;
  step.seq_len = seq_len;
  step.seed = ckpt.cfg.train.seed;
  step.training = false;
  Ids tokens = prompt_ids;
  Tensor window = Tensor::empty({1, seq_len}, DType::kI32);
  Tensor row = Tensor::empty({1, vocab}, DType::kF64);
  std::vector<double> logits(static_cast<size_t>(vocab));
  *t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < o.max_tokens; ++i) {
    // The last <= seq_len tokens, then the padding.
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(tokens.size()), seq_len);
    int32_t* w = window.data<int32_t>();
    std::copy(tokens.end() - n, tokens.end(), w);
    std::fill(w + n, w + seq_len, pad_id(tokenizer));
    MOE_ASSIGN_OR_RETURN(Tensor all, model->logits(window, step));
    MOE_ASSIGN_OR_RETURN(Tensor last, ckpt.ctx->read_back(all.view().rows(n - 1, n)));
    MOE_RETURN_IF_ERROR(convert_into(last, row));
    std::copy(row.data<double>(), row.data<double>() + vocab, logits.begin());
    // One draw per token, keyed by its position in the text (prompt included).
    const double u = rng.uniform_f64(tokens.size());
    MOE_ASSIGN_OR_RETURN(const int32_t id, sample_token(logits, o.sampling, u));
    tokens.push_back(id);
    MOE_RETURN_IF_ERROR(stream->add(id));
  }
  return tokens;
}

// Reports the speed (and with --ids the ids) on stderr; a failed stdout is an error.
Status report_generation(const GenerateOptions& o, double seconds, const Ids& prompt_ids,
                         const Ids& tokens) {
  std::fprintf(stderr, "momoe-generate: %lld token(s) in %.2f s (%.1f tok/s)\n",
               static_cast<long long>(o.max_tokens), seconds,
               static_cast<double>(o.max_tokens) / std::max(seconds, 1e-9));
  if (o.print_ids) {
    nlohmann::ordered_json ids;
    ids["prompt_ids"] = prompt_ids;
    ids["ids"] = Ids(tokens.begin() + static_cast<int64_t>(prompt_ids.size()), tokens.end());
    std::fprintf(stderr, "%s\n", ids.dump().c_str());
  }
  // A closed or full stdout (a pipe whose reader left) is an error, not a silent success.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    return unavailable_error("writing the generated text to stdout failed: ", std::strerror(errno));
  }
  return Status::OK();
}

// Prints the prompt and the tokens sampled after it, each as soon as it is sampled.
Status generate(const FlagParser& flags) {
  MOE_ASSIGN_OR_RETURN(const GenerateOptions o, read_generate_options(flags));
  MOE_ASSIGN_OR_RETURN(CheckpointModel ckpt, open_checkpoint(flags.get("checkpoint")));
  MOE_RETURN_IF_ERROR(open_device_from_flags(&ckpt, flags));
  const data::Tokenizer& tokenizer = *ckpt.tokenizer;
  CheckpointTokenizer tokenizers;
  MOE_RETURN_IF_ERROR(start_tokenizer(ckpt, &tokenizers));
  MOE_ASSIGN_OR_RETURN(
      const PromptIds tokenized,
      tokenize_prompt(o.prompt, tokenizer, tokenizers.encoder.get(), o.allow_unknown));
  const Ids& prompt_ids = tokenized.ids;
  if (tokenizers.encoder != nullptr) MOE_RETURN_IF_ERROR(tokenizers.encoder->finish());
  MOE_RETURN_IF_ERROR(load_model(&ckpt));

  std::fprintf(stderr,
               "momoe-generate: checkpoint %s (step %lld), %s, on %s; prompt of %zu token(s), "
               "%lld to generate\n",
               ckpt.dir.c_str(), static_cast<long long>(ckpt.manifest.step),
               tokenizer.describe().c_str(), ckpt.device_description.c_str(), prompt_ids.size(),
               static_cast<long long>(o.max_tokens));
  TextStream stream(tokenizers.decode, tokenizer.eos_id());
  MOE_RETURN_IF_ERROR(stream.start(prompt_ids, tokenized.empty));
  std::chrono::steady_clock::time_point t0;
  MOE_ASSIGN_OR_RETURN(const Ids tokens, sample_tokens(ckpt, o, prompt_ids, &stream, &t0));
  MOE_RETURN_IF_ERROR(stream.finish());
  if (tokenizers.decoder != nullptr) MOE_RETURN_IF_ERROR(tokenizers.decoder->finish());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report_generation(o, seconds, prompt_ids, tokens);
}

int run(int argc, char** argv) {
  FlagParser flags(
      "usage: momoe-generate --checkpoint DIR [--prompt TEXT | --prompt-file FILE] [flags]\n"
      "  prints the prompt and the tokens sampled after it, each as soon as it is sampled\n",
      "example: momoe-generate --checkpoint runs/quickstart/ckpt-00000300 --prompt \"The jury "
      "said\" --max-tokens 40 --temperature 0.8 --top-k 40 --seed 1\n");
  flags.value("checkpoint", "a checkpoint directory (RUN_DIR/ckpt-<step>)");
  flags.value("prompt", "the text to continue (default: empty: start a new line)");
  flags.value("prompt-file", "read the prompt from this UTF-8 file instead");
  flags.value("max-tokens", "tokens to generate (default 50)");
  flags.value("temperature", "softmax temperature (default 1; 0: greedy, the most likely token)");
  flags.value("top-k", "sample among the K most likely tokens only (default 0: off)");
  flags.value("top-p",
              "sample among the most likely tokens that make up probability P (default 1: off)");
  flags.value("seed", "random seed (default 0): the same flags give the same text");
  flags.switch_flag("allow-unknown",
                    "read prompt words the vocabulary does not know as <unk> (default: refuse)");
  flags.switch_flag("ids",
                    "also print the prompt's and the generated token ids as one JSON "
                    "line on stderr");
  declare_device_flags(&flags);
  if (std::optional<int> code = flags.parse_or_exit_code(argc, argv)) return *code;
  if (!flags.has("checkpoint")) {
    return exit_with(invalid_argument_error("--checkpoint DIR is required"));
  }
  if (!flags.positional().empty()) {
    return exit_with(invalid_argument_error("unexpected argument '", flags.positional()[0],
                                            "' (the prompt goes after --prompt)"));
  }
  const Status done = generate(flags);
  if (!done.ok()) return exit_with(done);
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) { return moe::run(argc, argv); }
