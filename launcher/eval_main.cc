// momoe-eval: perplexity of a checkpoint on any UTF-8 text file (plain or .gz), clean and under the
// word-swap attack. The checkpoint brings its own config and vocabulary; any EP layout loads, on
// the CPU or a GPU (--device; by default the device it was trained on).
//
//   momoe-eval --checkpoint runs/quickstart/ckpt-00000300 --text my_corpus.txt [--attack-rate
//   0.025]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "core/checkpoint/checkpoint_io.h"
#include "core/checkpoint/training_checkpoint.h"
#include "core/data/attack.h"
#include "core/data/corpus.h"
#include "core/data/dataset.h"
#include "core/data/tokenizer.h"
#include "core/train/coordinator.h"
#include "core/train/evaluator.h"
#include "core/train/routing_file.h"
#include "core/train/run_device.h"
#include "io/file_util.h"
#include "kernels/cpu/blas_library.h"
#include "launcher/device_flags.h"
#include "launcher/exit_status.h"
#include "launcher/flags.h"
#include "launcher/momoe_data_process.h"
#include "proto/run_convert.h"

namespace moe {
namespace {

int fail(const Status& s) { return exit_with(s); }

// The text to evaluate, tokenized. `split` may read the shards of a dataset in `scratch`, and a
// SequenceSet views its ids: it stays where it is until the evaluation ends.
struct EvalText {
  io::TempDir scratch;
  data::TokenizedCorpus tokenized;
  data::TokenSplit split;
};

// Tokenizes `text` with the checkpoint's tokenizer into `out`.
Status tokenize_text(const CheckpointModel& c, const std::string& dir, const std::string& text,
                     EvalText* out) {
  const std::shared_ptr<const data::Tokenizer>& tokenizer = c.tokenizer;
  // A SentencePiece checkpoint's text is tokenized by momoe-data (data/tokenizer.h says why) into
  // a temporary dataset, read from its shards.
  if (tokenizer->can_encode()) {
    MOE_ASSIGN_OR_RETURN(out->split, data::tokenize_split("text", text, *tokenizer));
    return Status::OK();
  }
  MOE_ASSIGN_OR_RETURN(out->scratch, io::TempDir::create("momoe_eval"));
  data::PrepareSpec spec;
  spec.out_dir = out->scratch.path() + "/text";
  spec.train = {text};
  spec.tokenizer = "sentencepiece";
  spec.sp_model_path = dir + "/" + data::kSentencePieceModelFile;
  spec.threads = c.cfg.parallel.threads;
  MOE_RETURN_IF_ERROR(data::run_prepare_process(spec, /*quiet=*/true));
  MOE_ASSIGN_OR_RETURN(out->tokenized, data::open_dataset(spec.out_dir, /*verify_payload=*/true));
  if (out->tokenized.tokenizer->fingerprint() != tokenizer->fingerprint()) {
    return internal_error("momoe-data tokenized ", text, " with another model than ", dir);
  }
  out->split = out->tokenized.train;
  out->split.source = text;
  return Status::OK();
}

// The evaluation's flags whose defaults come from the checkpoint, read once its model is loaded.
struct EvalFlags {
  int64_t batch = 0;
  int64_t max_sequences = 0;
  double rate = 0;
};

// Reads --batch, --max-sequences and --attack-rate, refusing values out of range.
StatusOr<EvalFlags> read_eval_flags(const FlagParser& flags, const CheckpointModel& c) {
  const RunConfig& cfg = c.cfg;
  EvalFlags o;
  // The trainer evaluates in batches of its per-rank micro-batch; at one rank that is the run's
  // micro-batch, batch_size / grad_accum. Without an AC router or an evaluation capacity the
  // perplexity does not depend on the batch (up to rounding); with one it does (the paper's
  // per-batch rule), so the batch is the recorded one and another is refused.
  MOE_ASSIGN_OR_RETURN(o.batch, flags.get_int("batch", c.eval_batch()));
  if (const std::string why = cfg.model.batch_dependent_evaluation();
      !why.empty() && o.batch != c.eval_batch()) {
    return invalid_argument_error("--batch ", o.batch, ": ", why,
                                  ", so its perplexity depends on which sequences share a "
                                  "batch; it is evaluated in the batches it was trained with, ",
                                  c.eval_batch(),
                                  " sequences (train.batch_size / train.grad_accum of the "
                                  "checkpoint's config): omit --batch");
  }
  MOE_ASSIGN_OR_RETURN(o.max_sequences, flags.get_int("max-sequences", 0));
  MOE_ASSIGN_OR_RETURN(o.rate, flags.get_double("attack-rate", cfg.train.attack_rate));
  if (o.batch < 1) return invalid_argument_error("--batch ", o.batch, " must be >= 1");
  if (o.max_sequences < 0) {
    return invalid_argument_error("--max-sequences ", o.max_sequences, " must be >= 0 (0: all)");
  }
  if (!(o.rate >= 0.0 && o.rate < 1.0)) {
    return invalid_argument_error("--attack-rate ", o.rate, " must be in [0, 1)");
  }
  return o;
}

// Progress on stderr (the result stays alone on stdout): a line every 5 s
// ($MOMOE_PROGRESS_SECONDS), counting the sequences of every pass against `total`.
class EvalProgress {
 public:
  EvalProgress(int64_t total, int64_t seq_len)
      : interval_(progress_interval_seconds(5)),
        t0_(std::chrono::steady_clock::now()),
        last_(t0_),
        total_(total),
        seq_len_(seq_len) {}

  // The progress callback of one pass, named `what`.
  std::function<void(int64_t, int64_t)> pass(const char* what) {
    return [this, what](int64_t done, int64_t) {
      const auto now = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(now - last_).count() < interval_) return;
      last_ = now;
      const double s = std::chrono::duration<double>(now - t0_).count();
      const double per_second = static_cast<double>(done_before_ + done) / std::max(s, 1e-9);
      std::fprintf(
          stderr, "momoe-eval: %s: %lld/%lld sequences, %.0f tok/s, ETA %s\n", what,
          static_cast<long long>(done_before_ + done), static_cast<long long>(total_),
          per_second * static_cast<double>(seq_len_),
          format_duration(static_cast<double>(total_ - done_before_ - done) / per_second).c_str());
    };
  }

  // Sequences the earlier passes evaluated.
  void set_done_before(int64_t done_before) { done_before_ = done_before; }

 private:
  const double interval_;
  const std::chrono::steady_clock::time_point t0_;
  std::chrono::steady_clock::time_point last_;
  const int64_t total_;
  const int64_t seq_len_;
  int64_t done_before_ = 0;
};

// Evaluates the clean text; with --routing-out, also writes its routing decisions (kept in
// `routing`).
StatusOr<EvalResult> evaluate_clean(const CheckpointModel& c, const data::SequenceSet& set,
                                    const EvalFlags& o, const std::string& routing_out,
                                    EvalProgress* progress,
                                    std::vector<RoutingDecisions>* routing) {
  TransformerLM* model = c.model.get();
  if (!routing_out.empty() && model->num_moe_layers() == 0) {
    return invalid_argument_error("--routing-out ", routing_out,
                                  ": the model has no MoE layer, so no routing decisions");
  }
  MOE_ASSIGN_OR_RETURN(
      EvalResult clean,
      evaluate_perplexity(
          model, set,
          {o.batch, o.max_sequences, c.cfg.train.seed, nullptr, nullptr, progress->pass("clean"),
           routing_out.empty() ? nullptr : routing, c.tokenizer->unk_id()}));
  if (!routing_out.empty()) {
    MOE_RETURN_IF_ERROR(write_routing_file(routing_out, model->context(), model->num_moe_layers(),
                                           o.batch, c.cfg.model.seq_len, *routing));
  }
  return clean;
}

// The result line's clean part: the checkpoint, the text and the clean perplexity. `sequences`
// were evaluated of the set's `text_sequences`.
nlohmann::ordered_json clean_result(const CheckpointModel& c, const std::string& dir,
                                    const std::string& text, const data::TokenSplit& split,
                                    const EvalResult& clean, int64_t batch, int64_t sequences,
                                    int64_t text_sequences) {
  // One JSON object (nlohmann escapes the paths: quotes, backslashes, control characters; bytes
  // that are not UTF-8 become U+FFFD).
  nlohmann::ordered_json line;
  line["checkpoint"] = dir;
  line["step"] = c.manifest.step;
  line["text"] = text;
  line["tokens"] = clean.tokens;
  line["batch"] = batch;
  if (clean.subset) {
    // The first sequences only: the figures of the evaluated tokens are theirs; words and bytes
    // are the whole text's (the ids do not say how much text they came from), so the measures
    // per word and per byte are estimates at the whole text's ratios, and named so.
    line["sequences"] = sequences;
    line["text_sequences"] = text_sequences;
    line["unknown_fraction"] = clean.unknown_fraction;
    line["text_words"] = split.stats.words;
    line["text_bytes"] = split.stats.bytes;
    line["ppl"] = clean.perplexity();
    if (const auto w = clean.word_perplexity()) line["word_ppl_estimate"] = *w;
    if (const auto b = clean.bits_per_byte()) line["bits_per_byte_estimate"] = *b;
    return line;
  }
  // How much of the text the checkpoint's vocabulary does not cover (each such word is <unk>).
  line["unknown_fraction"] = split.size() == 0 ? 0.0
                                               : static_cast<double>(split.stats.unknown) /
                                                     static_cast<double>(split.size());
  line["words"] = split.stats.words;
  line["bytes"] = split.stats.bytes;
  line["ppl"] = clean.perplexity();
  // Comparable across tokenizers (core/train/evaluator.h).
  if (const auto w = clean.word_perplexity()) line["word_ppl"] = *w;
  if (const auto b = clean.bits_per_byte()) line["bits_per_byte"] = *b;
  return line;
}

// With --attack-rate > 0, adds the word-swap attack's perplexity to `line` (or why it was not
// run: the checkpoint's tokenizer is not the word one), and its realised swap fraction over the
// evaluated tokens (`set`'s first `sequences`).
Status add_attack_result(const CheckpointModel& c, const data::TokenSplit& split,
                         const data::SequenceSet& set, int64_t sequences, const EvalFlags& o,
                         EvalProgress* progress, nlohmann::ordered_json* line) {
  const RunConfig& cfg = c.cfg;
  if (o.rate > 0 && c.tokenizer->kind() != data::Tokenizer::Kind::kWord) {
    (*line)["attack"] =
        "not run: the word-swap attack replaces words, and this checkpoint's tokenizer "
        "is SentencePiece";
  } else if (o.rate > 0) {
    MOE_ASSIGN_OR_RETURN(
        data::AttackResult a,
        data::attack_tokens(split.ids, o.rate, cfg.train.attack_seed, c.tokenizer->vocabulary()));
    data::TokenSplit attacked = split;
    attacked.ids = std::move(a.tokens);
    MOE_ASSIGN_OR_RETURN(data::SequenceSet aset,
                         data::SequenceSet::create(attacked, cfg.model.seq_len));
    MOE_ASSIGN_OR_RETURN(EvalResult att,
                         evaluate_perplexity(c.model.get(), aset,
                                             {o.batch, o.max_sequences, cfg.train.seed, nullptr,
                                              nullptr, progress->pass("attacked"), nullptr}));
    double swap_fraction = a.swap_fraction;
    if (att.subset) {  // the attack is positional: the first tokens alone swap the same
      MOE_ASSIGN_OR_RETURN(const std::vector<int32_t> first, set.leading_tokens(sequences));
      MOE_ASSIGN_OR_RETURN(
          const data::AttackResult part,
          data::attack_tokens(first, o.rate, cfg.train.attack_seed, c.tokenizer->vocabulary()));
      swap_fraction = part.swap_fraction;
    }
    (*line)["attack_rate"] = o.rate;
    (*line)["realised_swap_fraction"] = swap_fraction;
    (*line)["attacked_ppl"] = att.perplexity();
  }
  return Status::OK();
}

// Evaluates the checkpoint on the text, clean and attacked: the result as one JSON line.
StatusOr<std::string> evaluate(const FlagParser& flags) {
  // The routing file is written at the end: where it goes is checked before the evaluation.
  MOE_RETURN_IF_ERROR(flags.check_output_file("routing-out"));
  const std::string dir = flags.get("checkpoint");
  MOE_ASSIGN_OR_RETURN(CheckpointModel c, open_checkpoint(dir));
  MOE_RETURN_IF_ERROR(open_device_from_flags(&c, flags));
  const std::string text = flags.get("text");
  EvalText tokenized;
  MOE_RETURN_IF_ERROR(tokenize_text(c, dir, text, &tokenized));
  const data::TokenSplit& split = tokenized.split;
  // The model after the text (a child process is started before the weights fill memory).
  MOE_RETURN_IF_ERROR(load_model(&c));
  MOE_ASSIGN_OR_RETURN(const EvalFlags o, read_eval_flags(flags, c));
  MOE_ASSIGN_OR_RETURN(data::SequenceSet set,
                       data::SequenceSet::create(split, c.cfg.model.seq_len));
  const int64_t sequences =
      o.max_sequences > 0 ? std::min(o.max_sequences, set.size()) : set.size();
  EvalProgress progress(
      sequences * (o.rate > 0 && c.tokenizer->kind() == data::Tokenizer::Kind::kWord ? 2 : 1),
      c.cfg.model.seq_len);
  std::vector<RoutingDecisions> routing;
  MOE_ASSIGN_OR_RETURN(EvalResult clean,
                       evaluate_clean(c, set, o, flags.get("routing-out"), &progress, &routing));
  progress.set_done_before(sequences);
  nlohmann::ordered_json line =
      clean_result(c, dir, text, split, clean, o.batch, sequences, set.size());
  MOE_RETURN_IF_ERROR(add_attack_result(c, split, set, sequences, o, &progress, &line));
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

int run(int argc, char** argv) {
  FlagParser flags("usage: momoe-eval --checkpoint DIR --text FILE [flags]\n",
                   "example: momoe-eval --checkpoint runs/quickstart/ckpt-00000300 --text "
                   "data/brown/test.txt.gz --attack-rate 0.025\n");
  flags.value("checkpoint", "a checkpoint directory (RUN_DIR/ckpt-<step>)");
  flags.value("text",
              "a UTF-8 text file (plain, .gz or .zst), tokenized with the checkpoint's tokenizer");
  flags.value("attack-rate",
              "word-swap attack rate (default: the run's train.attack_rate; 0 = off)");
  flags.value("batch",
              "sequences per evaluation batch (default: the trainer's, batch_size / grad_accum; "
              "a model with an AC router or an evaluation capacity takes only that)");
  flags.value("max-sequences",
              "evaluate only the first N sequences (default: all); the JSON then gives their "
              "unknown_fraction and realised_swap_fraction, the whole text's text_words and "
              "text_bytes, and word_ppl_estimate and bits_per_byte_estimate at the whole text's "
              "tokens per word and per byte");
  flags.value("routing-out",
              "also write the clean evaluation's routing decisions (every MoE layer's experts, "
              "capacity slots and SparseMixer masks) to this safetensors file "
              "(core/train/routing_file.h), in a folder that exists (checked first)");
  declare_device_flags(&flags);
  if (std::optional<int> code = flags.parse_or_exit_code(argc, argv)) return *code;
  if (!flags.has("checkpoint") || !flags.has("text")) {
    return fail(invalid_argument_error("--checkpoint DIR and --text FILE are required"));
  }
  StatusOr<std::string> result = evaluate(flags);
  if (!result.ok()) return fail(result.status());
  std::printf("%s\n", result->c_str());
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) { return moe::run(argc, argv); }
