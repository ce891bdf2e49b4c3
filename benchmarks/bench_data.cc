// momoe-bench data: the data pipeline against what training needs (issue: real corpora).
//   1. tokenization: `momoe-data prepare` of a generated corpus (the bundled Brown text repeated
//      to --mb MB) at each thread count, in MB of text per second (per core too), with the word
//      vocabulary, and with SentencePiece (BPE 8000, in a momoe-data child) at every core;
//   2. the loader: random training batches read from the shards (SequenceSet::fill, the trainer's
//      access pattern) in tokens/s, against the tokens/s a training step of the quick-start and
//      the SMoE-medium shapes consumes on this machine (the loader must be >= 20x faster);
//   3. with --corpus-gb G: the peak resident memory of momoe-train (a child process) training
//      from a generated G-GB dataset, against the same run on the small one.
// Everything it writes goes into one temporary folder, removed at the end.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "base/hash.h"
#include "benchmarks/bench_util.h"
#include "comm/world.h"
#include "core/data/dataset.h"
#include "core/data/prepare.h"
#include "core/data/sequences.h"
#include "core/data/token_cache.h"
#include "io/file_util.h"
#include "launcher/momoe_data_process.h"
#include "proto/run_convert.h"

namespace moe::bench {

StatusOr<double> train_tokens_per_second(const std::string& preset, int steps, comm::World* world);

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A dataset of `gb` GB of pseudo-random ids in [0, vocab) with the vocabulary of `like`, in
// 256 MB shards, written without tokenizing (what it holds does not matter to the loader).
Status generate_dataset(const std::string& dir, const std::string& like, double gb) {
  fs::create_directories(dir);
  MOE_ASSIGN_OR_RETURN(data::DatasetIndex index, data::read_dataset_index(like));
  fs::copy_file(fs::path(like) / data::kDatasetVocabFile, fs::path(dir) / data::kDatasetVocabFile);
  data::SplitEntry split;
  split.sources = {"generated"};
  const int64_t total = static_cast<int64_t>(gb * 1e9 / 4);
  const int64_t per_shard = int64_t{1} << 26;
  std::vector<int32_t> ids;
  std::mt19937_64 rng(7);
  uint64_t fnv = kFnv1a64Offset;
  for (int64_t done = 0, s = 0; done < total; ++s) {
    const int64_t n = std::min(per_shard, total - done);
    ids.resize(static_cast<size_t>(n));
    for (int32_t& id : ids)
      id = static_cast<int32_t>(rng() % static_cast<uint64_t>(index.vocab_size));
    data::TextStats stats;
    stats.words = n;
    stats.bytes = 5 * n;
    const std::string name = data::shard_file_name("train", s);
    MOE_RETURN_IF_ERROR(data::write_token_cache((fs::path(dir) / name).string(), ids,
                                                index.vocab_fingerprint, stats));
    split.shards.push_back({name, n, io::crc32_of(ids.data(), ids.size() * 4)});
    fnv = fnv1a64_update(fnv, ids.data(), ids.size() * 4);
    split.tokens += n;
    split.stats += stats;
    done += n;
  }
  split.contents_fnv = fnv;
  index.splits.clear();
  index.splits["train"] = split;
  return data::write_dataset_index(dir, index);
}

// Runs momoe-train (beside this binary's folder) to completion; its peak resident set in bytes.
StatusOr<double> train_peak_rss(const std::vector<std::string>& args) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const std::string train = (exe.parent_path().parent_path() / "launcher" / "momoe-train").string();
  if (!fs::exists(train)) return not_found_error("momoe-bench data: no momoe-train at ", train);
  std::vector<std::string> all = {train};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return internal_error("fork failed");
  if (pid == 0) {
    if (std::freopen("/dev/null", "w", stdout) == nullptr) _exit(126);
    execv(train.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage usage {};
  if (wait4(pid, &status, 0, &usage) < 0) return internal_error("wait4 failed");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return internal_error("momoe-train exited with status ", status, " (", train, ")");
  }
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

// What `momoe-bench data` was asked for (its flags, with their defaults).
struct DataOptions {
  std::vector<int64_t> thread_list;
  double mb = 64;
  double loader_seconds = 2;
  int train_steps = 2;
  double corpus_gb = 0;
  int64_t rss_steps = 20;
};

// Parses the flags; the benchmark runs as one process.
StatusOr<DataOptions> parse_data_options(int argc, char** argv, const comm::World& world) {
  MOE_ASSIGN_OR_RETURN(Args a, Args::parse(argc, argv,
                                           {"mb", "threads", "loader-seconds", "train-steps",
                                            "corpus-gb", "rss-steps"}));
  if (world.size() != 1) return invalid_argument_error("momoe-bench data runs as one process");
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<int64_t> default_threads;
  for (int t = 1; t < cores; t *= 2) default_threads.push_back(t);
  default_threads.push_back(cores);
  DataOptions o;
  o.thread_list = a.get_list("threads", default_threads);
  if (o.thread_list.empty()) {
    return invalid_argument_error("--threads is empty: give thread counts, e.g. --threads 1,2");
  }
  for (int64_t t : o.thread_list) {
    if (t < 0) {
      return invalid_argument_error("--threads ", t, ": each count must be >= 0 (0: every core)");
    }
  }
  o.mb = static_cast<double>(a.get("mb", 64));
  o.loader_seconds = static_cast<double>(a.get("loader-seconds", 2));
  o.train_steps = static_cast<int>(a.get("train-steps", 2));
  o.corpus_gb = static_cast<double>(a.get("corpus-gb", 0));
  o.rss_steps = a.get("rss-steps", 20);
  return o;
}

// Writes `text` to `path` as many times as it takes to reach `mb` MB.
Status write_repeated_text(const std::string& path, const std::string& text, double mb) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return internal_error("cannot write ", path);
  double written = 0;
  while (written < mb * 1e6) {
    std::fwrite(text.data(), 1, text.size(), f);
    written += static_cast<double>(text.size());
  }
  std::fclose(f);
  return Status::OK();
}

// Prepares the text with the word vocabulary at each thread count, printing one line each; the
// last prepared dataset (the earlier ones are removed).
StatusOr<std::string> tokenize_with_words(const DataOptions& o, const std::string& tmp,
                                          const std::string& text_path, double text_bytes) {
  std::string prepared;
  for (int64_t t : o.thread_list) {
    data::PrepareSpec spec;
    spec.out_dir = tmp + "/prepared-" + std::to_string(t);
    spec.train = {text_path};
    spec.vocab.max_size = 10000;
    spec.threads = static_cast<int>(t);
    const Clock::time_point t0 = Clock::now();
    MOE_ASSIGN_OR_RETURN(const data::DatasetIndex index, data::prepare_dataset(spec));
    const double s = seconds_since(t0);
    JsonLine j("data");
    j.str("what", "tokenize")
        .str("tokenizer", "word")
        .num("threads", static_cast<double>(t))
        .num("text_mb", text_bytes / 1e6)
        .num("seconds", s)
        .num("mb_per_second", text_bytes / 1e6 / s)
        .num("mb_per_second_per_thread", text_bytes / 1e6 / s / static_cast<double>(t))
        .num("tokens_per_second", static_cast<double>(index.splits.at("train").tokens) / s);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    if (!prepared.empty()) fs::remove_all(prepared);
    prepared = spec.out_dir;
  }
  return prepared;
}

// SentencePiece (in momoe-data: tokenizer.h says why) at the last thread count: training the
// model on the text, then encoding it with that model; prints one line.
Status tokenize_with_sentencepiece(const DataOptions& o, const std::string& tmp,
                                   const std::string& text_path, double text_bytes) {
  const int threads = static_cast<int>(o.thread_list.back());
  data::PrepareSpec spec;
  spec.out_dir = tmp + "/sp-train";
  spec.train = {text_path};
  spec.tokenizer = "sentencepiece";
  spec.threads = threads;
  Clock::time_point t0 = Clock::now();
  MOE_RETURN_IF_ERROR(data::run_prepare_process(spec, /*quiet=*/true));
  const double with_training = seconds_since(t0);
  data::PrepareSpec encode = spec;
  encode.out_dir = tmp + "/sp-encode";
  encode.sp_model_path = spec.out_dir + "/" + data::kSentencePieceModelFile;
  t0 = Clock::now();
  MOE_RETURN_IF_ERROR(data::run_prepare_process(encode, /*quiet=*/true));
  const double s = seconds_since(t0);
  MOE_ASSIGN_OR_RETURN(const data::DatasetIndex index, data::read_dataset_index(encode.out_dir));
  JsonLine j("data");
  j.str("what", "tokenize")
      .str("tokenizer", "sentencepiece bpe 8000")
      .num("threads", threads)
      .num("text_mb", text_bytes / 1e6)
      .num("seconds_training_and_encoding", with_training)
      .num("seconds", s)
      .num("mb_per_second", text_bytes / 1e6 / s)
      .num("mb_per_second_per_thread", text_bytes / 1e6 / s / threads)
      .num("tokens_per_second", static_cast<double>(index.splits.at("train").tokens) / s);
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  fs::remove_all(spec.out_dir);
  fs::remove_all(encode.out_dir);
  return Status::OK();
}

// A training shape the loader is measured against.
struct LoaderShape {
  const char* preset;
  int64_t seq_len, batch;
};

// Reads random batches of `sh` from the training split for --loader-seconds, then times the
// training step of its preset; prints the two tokens/s side by side.
Status measure_loader_shape(const DataOptions& o, const data::TokenizedCorpus& corpus,
                            const LoaderShape& sh, std::mt19937_64& rng, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(const data::SequenceSet set,
                       data::SequenceSet::create(corpus.train, sh.seq_len));
  Tensor inputs = Tensor::zeros(moe::Shape{sh.batch, sh.seq_len}, DType::kI32);
  Tensor targets = Tensor::zeros(moe::Shape{sh.batch, sh.seq_len}, DType::kI32);
  std::vector<int64_t> ids(static_cast<size_t>(sh.batch));
  int64_t batches = 0;
  const Clock::time_point t0 = Clock::now();
  double s = 0;
  while ((s = seconds_since(t0)) < o.loader_seconds) {
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % static_cast<uint64_t>(set.size()));
    MOE_RETURN_IF_ERROR(set.fill(ids, inputs.view(), targets.view()));
    ++batches;
  }
  const double loader = static_cast<double>(batches * sh.batch * sh.seq_len) / s;
  MOE_ASSIGN_OR_RETURN(const double step, train_tokens_per_second(sh.preset, o.train_steps, world));
  JsonLine j("data");
  j.str("what", "loader")
      .str("preset", sh.preset)
      .num("seq_len", static_cast<double>(sh.seq_len))
      .num("batch", static_cast<double>(sh.batch))
      .num("loader_tokens_per_second", loader)
      .num("step_tokens_per_second", step)
      .num("loader_over_step", loader / step)
      .str("ok", loader >= 20 * step ? "yes" : "no (the loader is < 20x the step)");
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
  return Status::OK();
}

// The loader against the training step of the quick-start and the SMoE-medium shapes (one random
// stream across both); prints one line each.
Status measure_loader(const DataOptions& o, const data::TokenizedCorpus& corpus,
                      const RunConfig& quick, comm::World* world) {
  std::mt19937_64 rng(11);
  for (const LoaderShape& sh :
       {LoaderShape{"quickstart", quick.model.seq_len, quick.train.batch_size},
        LoaderShape{"smoe-medium", 512, 4}}) {
    MOE_RETURN_IF_ERROR(measure_loader_shape(o, corpus, sh, rng, world));
  }
  return Status::OK();
}

// The peak resident memory of momoe-train from the small dataset `prepared`, then from a
// generated --corpus-gb one; prints one line.
Status measure_peak_rss(const DataOptions& o, const std::string& tmp, const std::string& prepared,
                        double text_bytes) {
  const double gb = o.corpus_gb;
  const std::string big = tmp + "/big";
  const Clock::time_point t0 = Clock::now();
  MOE_RETURN_IF_ERROR(generate_dataset(big, prepared, gb));
  const double gen_seconds = seconds_since(t0);
  const std::string steps = std::to_string(o.rss_steps);
  const std::string config = std::string(MOE_SOURCE_DIR) + "/configs/quickstart.pbtxt";
  double rss[2] = {0, 0};
  double seconds[2] = {0, 0};
  const std::string dirs[2] = {prepared, big};
  for (int k = 0; k < 2; ++k) {
    const Clock::time_point r0 = Clock::now();
    MOE_ASSIGN_OR_RETURN(
        rss[k], train_peak_rss({"--config", config, "--run-dir", tmp + "/run" + std::to_string(k),
                                "--set", "data.dataset=" + dirs[k], "--set", "train.steps=" + steps,
                                "--set", "train.probe_every=0"}));
    seconds[k] = seconds_since(r0);
  }
  JsonLine j("data");
  j.str("what", "peak_rss")
      .num("corpus_gb", static_cast<double>(fs::file_size(big + "/train-00000.tok")) > 0 ? gb : 0)
      .num("generate_seconds", gen_seconds)
      .num("train_steps", static_cast<double>(o.rss_steps))
      .num("small_corpus_mb", text_bytes / 1e6)
      .num("peak_rss_small_mb", rss[0] / 1e6)
      .num("peak_rss_large_mb", rss[1] / 1e6)
      .num("difference_mb", (rss[1] - rss[0]) / 1e6)
      .num("run_seconds_small", seconds[0])
      .num("run_seconds_large", seconds[1])
      .str("ok", rss[1] - rss[0] < 1e9 ? "yes" : "no (more than 1 GB above the small corpus)");
  std::printf("%s\n", j.dump().c_str());
  return Status::OK();
}

// The three measurements in turn.
Status run_data(const DataOptions& o, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(const io::TempDir tmp, io::TempDir::create("momoe_bench_data"));
  // 1. Tokenization.
  MOE_ASSIGN_OR_RETURN(const std::string brown, data::read_text_file(std::string(MOE_SOURCE_DIR) +
                                                                     "/data/brown/train.txt.gz"));
  const std::string text_path = tmp.path() + "/corpus.txt";
  MOE_RETURN_IF_ERROR(write_repeated_text(text_path, brown, o.mb));
  const double text_bytes = static_cast<double>(fs::file_size(text_path));
  MOE_ASSIGN_OR_RETURN(const std::string prepared,
                       tokenize_with_words(o, tmp.path(), text_path, text_bytes));
  if (data::sentencepiece_built()) {
    MOE_RETURN_IF_ERROR(tokenize_with_sentencepiece(o, tmp.path(), text_path, text_bytes));
  }

  // 2. The loader against the step.
  MOE_ASSIGN_OR_RETURN(const data::TokenizedCorpus corpus, data::open_dataset(prepared, true));
  MOE_ASSIGN_OR_RETURN(
      const RunConfig quick,
      load_run_config(std::string(MOE_SOURCE_DIR) + "/configs/quickstart.pbtxt", {}, 0));
  MOE_RETURN_IF_ERROR(measure_loader(o, corpus, quick, world));

  // 3. Peak resident memory training from a large dataset.
  if (o.corpus_gb > 0) MOE_RETURN_IF_ERROR(measure_peak_rss(o, tmp.path(), prepared, text_bytes));
  return Status::OK();
}

}  // namespace

StatusOr<BenchRun> bench_data(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(const DataOptions o, parse_data_options(argc, argv, *world));
  return BenchRun([o, world] { return run_data(o, world); });
}

}  // namespace moe::bench
