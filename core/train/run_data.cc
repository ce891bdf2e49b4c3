#include "core/train/run_data.h"

#include <filesystem>

#include "base/check.h"
#include "base/hash.h"
#include "base/logging.h"
#include "core/data/corpus.h"
#include "core/data/dataset.h"
#include "core/data/prepare.h"
#include "core/data/text_stream.h"
#include "io/file_util.h"

namespace moe {
namespace {

Status make_sequences(const data::TokenSplit& split, int64_t seq_len,
                      std::optional<data::SequenceSet>* out) {
  if (!split.present()) return Status::OK();
  MOE_ASSIGN_OR_RETURN(data::SequenceSet set, data::SequenceSet::create(split, seq_len));
  out->emplace(std::move(set));
  return Status::OK();
}

std::string cache_dir_of(const RunConfig& cfg, const std::string& run_dir) {
  return cfg.data.cache_dir.empty() ? run_dir + "/cache" : cfg.data.cache_dir;
}

// The data paths of the config of the right kind: data.dataset a folder, the texts files. A text
// file named as the dataset or a folder named as a text is refused with what to set instead.
Status check_data_path_kinds(const DataConfig& data) {
  std::error_code ec;
  const std::string& dataset = data.dataset;
  if (!dataset.empty() && std::filesystem::exists(dataset, ec) &&
      !std::filesystem::is_directory(dataset, ec)) {
    return invalid_argument_error(
        "data.dataset = ", dataset,
        " is a text file, not a prepared dataset (a folder made by momoe-data prepare): to "
        "train on the text itself, set data.train=",
        dataset,
        " (with data.valid and data.test) instead of data.dataset; or prepare it once with "
        "`momoe-data prepare --train ",
        dataset, " --out NEW_DIR` (NEW_DIR a new directory) and set data.dataset=NEW_DIR");
  }
  for (const auto& [field, path] :
       {std::pair{"data.train", &data.train}, std::pair{"data.valid", &data.valid},
        std::pair{"data.test", &data.test}}) {
    if (path->empty() || !std::filesystem::is_directory(*path, ec)) continue;
    if (std::filesystem::exists(*path + "/" + data::kDatasetIndexFile, ec)) {
      return invalid_argument_error(
          field, " = ", *path,
          " is a directory, not a text file; it holds a prepared dataset: train from it with "
          "data.dataset=",
          *path, " (and unset data.train, data.valid and data.test)");
    }
    return invalid_argument_error(
        field, " = ", *path,
        " is a directory, not a text file: prepare the text files in it once with `momoe-data "
        "prepare --train ",
        *path,
        " --out NEW_DIR` (folders are read whole; --valid and --test for the held-out "
        "text), then train with data.dataset=NEW_DIR");
  }
  return Status::OK();
}

// Text files with a SentencePiece tokenizer: prepared (the model trained, the text tokenized) once
// into the cache, keyed by the files' identities and the tokenizer options, then read as a
// dataset. A preparation interrupted by a kill resumes.
StatusOr<std::unique_ptr<RunData>> prepare_in_cache(const RunConfig& cfg,
                                                    const std::string& run_dir, bool verify,
                                                    const std::function<bool()>& stop) {
  data::PrepareSpec spec;
  spec.stop_requested = stop;
  spec.tokenizer = "sentencepiece";
  spec.sp_model_path = cfg.data.sp_model;
  spec.sp.model_type = cfg.data.sp_model_type;
  spec.sp.vocab_size = cfg.data.sp_vocab_size;
  spec.sp.max_sentences = cfg.data.sp_max_sentences;
  spec.threads = cfg.parallel.threads;
  spec.train = {cfg.data.train};
  if (!cfg.data.valid.empty()) spec.valid = {cfg.data.valid};
  if (!cfg.data.test.empty()) spec.test = {cfg.data.test};
  for (const std::string* path : {&cfg.data.train, &cfg.data.valid, &cfg.data.test}) {
    const std::string what = path->empty() ? std::string() : data::describe_non_regular(*path);
    if (what == "missing") return not_found_error("text file not found: ", *path);
    if (!what.empty()) {
      return invalid_argument_error("text file ", *path, " is ", what,
                                    ": a corpus must be a regular file (prepare folders of text "
                                    "with momoe-data prepare, then train with data.dataset)");
    }
  }
  // The cache is keyed by the files' identities (as the word tokenizer's token cache) and the
  // SentencePiece options.
  const std::string tag = "momoe-sentencepiece-cache-2";
  uint64_t key = fnv1a64(tag);
  for (const std::string* path :
       {&cfg.data.train, &cfg.data.valid, &cfg.data.test, &cfg.data.sp_model}) {
    MOE_RETURN_IF_ERROR(data::hash_file_identity(*path, &key));
  }
  const std::string options =
      str_cat(spec.sp.model_type, "|", spec.sp.vocab_size, "|", spec.sp.max_sentences);
  key = fnv1a64_update(key, options.data(), options.size());
  spec.out_dir = str_cat(cache_dir_of(cfg, run_dir), "/sentencepiece-", io::hex64(key).substr(2));
  // The prepared dataset, its splits named by their texts (not the cache).
  const auto open = [&](bool verify_payload) -> StatusOr<std::unique_ptr<RunData>> {
    auto d = std::make_unique<RunData>();
    MOE_ASSIGN_OR_RETURN(d->corpus, data::open_dataset(spec.out_dir, verify_payload));
    d->corpus.train.source = cfg.data.train;
    d->corpus.valid.source = cfg.data.valid;
    d->corpus.test.source = cfg.data.test;
    return d;
  };
  // Rank 0 prepared it (the others waited for its outcome): they only open it.
  if (!verify) return open(false);
  if (!std::filesystem::exists(spec.out_dir + "/" + data::kDatasetIndexFile)) {
    log_info("momoe: preparing ", cfg.data.train, " with a SentencePiece tokenizer into ",
             spec.out_dir, " (once: later runs on the same text reuse it)");
  }
  MOE_RETURN_IF_ERROR(data::prepare_here_or_elsewhere(spec));
  return open(true);
}

StatusOr<std::unique_ptr<RunData>> load_here(const RunConfig& cfg, const std::string& run_dir,
                                             bool verify, const std::function<bool()>& stop) {
  MOE_RETURN_IF_ERROR(check_data_path_kinds(cfg.data));
  if (!cfg.data.dataset.empty()) {
    auto d = std::make_unique<RunData>();
    MOE_ASSIGN_OR_RETURN(d->corpus, data::open_dataset(cfg.data.dataset, verify));
    if (cfg.data.sentencepiece &&
        d->corpus.tokenizer->kind() != data::Tokenizer::Kind::kSentencePiece) {
      return invalid_argument_error(
          "data.tokenizer.kind = SENTENCEPIECE, but data.dataset ", cfg.data.dataset,
          " was prepared with the ", d->corpus.tokenizer->describe(),
          " (a dataset brings its own tokenizer: unset data.tokenizer, or prepare the dataset "
          "with momoe-data prepare --tokenizer sentencepiece)");
    }
    return d;
  }
  if (cfg.data.sentencepiece) return prepare_in_cache(cfg, run_dir, verify, stop);
  data::CorpusSpec spec;
  spec.name = "corpus";
  spec.train_path = cfg.data.train;
  spec.valid_path = cfg.data.valid;
  spec.test_path = cfg.data.test;
  spec.vocab.max_size = cfg.data.vocab_max_size;
  spec.vocab.min_count = cfg.data.vocab_min_count;
  const std::string cache = cache_dir_of(cfg, run_dir);
  std::error_code ec;
  std::filesystem::create_directories(cache, ec);
  if (ec) return internal_error("cannot create cache directory ", cache, ": ", ec.message());
  auto d = std::make_unique<RunData>();
  MOE_ASSIGN_OR_RETURN(d->corpus, data::load_or_build_corpus(spec, cache));
  return d;
}

}  // namespace

StatusOr<std::unique_ptr<RunData>> load_run_data(const RunConfig& cfg, const std::string& run_dir,
                                                 comm::Communicator* world,
                                                 const std::function<bool()>& stop_requested) {
  std::unique_ptr<RunData> d;
  const int rank = world == nullptr ? 0 : world->rank();
  // Rank 0 builds (and caches); its outcome is broadcast so that a bad file fails every rank
  // with the same message instead of leaving the others waiting.
  // The error travels as "<code digit><message>".
  std::string error;
  if (rank == 0) {
    StatusOr<std::unique_ptr<RunData>> r = load_here(cfg, run_dir, /*verify=*/true, stop_requested);
    if (r.ok()) {
      d = std::move(r).value();
    } else {
      error = std::to_string(static_cast<int>(r.status().code())) + r.status().message();
    }
  }
  if (world != nullptr && world->world_size() > 1) {
    MOE_ASSIGN_OR_RETURN(error, world->broadcast_bytes(error, 0));
    if (error.empty() && rank != 0) {
      MOE_ASSIGN_OR_RETURN(d,
                           load_here(cfg, run_dir, /*verify=*/false, nullptr));  // rank 0 verified
    }
  }
  if (!error.empty()) return Status(static_cast<StatusCode>(error[0] - '0'), error.substr(1));

  const int64_t s = cfg.model.seq_len;
  const data::Vocabulary& vocab = d->corpus.vocab;
  MOE_RETURN_IF_ERROR(make_sequences(d->corpus.train, s, &d->train));
  MOE_RETURN_IF_ERROR(make_sequences(d->corpus.valid, s, &d->valid));
  MOE_RETURN_IF_ERROR(make_sequences(d->corpus.test, s, &d->test));
  for (auto [split, out, seq, rate] : {std::tuple{&d->corpus.valid, &d->attacked_valid,
                                                  &d->attacked_valid_seq, &d->attacked_valid_rate},
                                       std::tuple{&d->corpus.test, &d->attacked_test,
                                                  &d->attacked_test_seq, &d->attacked_test_rate}}) {
    // The attack swaps words: with a SentencePiece tokenizer it does not run (the trainer says so).
    if (!split->present() || cfg.train.attack_rate <= 0 ||
        d->corpus.tokenizer->kind() != data::Tokenizer::Kind::kWord) {
      continue;
    }
    // The attacked copy is held in memory (evaluation splits are small next to training's).
    MOE_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, data::materialize(*split));
    MOE_ASSIGN_OR_RETURN(data::AttackResult a, data::attack_tokens(ids, cfg.train.attack_rate,
                                                                   cfg.train.attack_seed, vocab));
    *out = *split;
    out->shards = nullptr;
    out->name = "attacked_" + split->name;
    out->ids = std::move(a.tokens);
    *rate = a.swap_fraction;
    MOE_RETURN_IF_ERROR(make_sequences(*out, s, seq));
  }
  return d;
}

}  // namespace moe
