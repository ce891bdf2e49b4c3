#include "core/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>

#include "base/logging.h"
#include "base/progress.h"
#include "comm/agree.h"
#include "core/checkpoint/checkpoint_io.h"
#include "core/data/attack.h"
#include "core/train/config_warnings.h"
#include "core/train/gemm_rate.h"
#include "core/train/grad_sync.h"
#include "core/train/memory_advice.h"
#include "core/train/memory_estimate.h"
#include "core/train/model_size.h"
#include "core/train/placement.h"
#include "core/train/startup_banner.h"
#include "kernels/common.h"
#include "kernels/cpu/blas_library.h"
#include "proto/run_convert.h"

namespace moe {
namespace {

// " | valid 181.2 per word, 1.93 bits/byte (21.27% <unk>)": the measures that compare across
// tokenizers, with the text's <unk> share beside them (they compare only at equal shares); ""
// when the text counts are unknown or the numbers are not finite. A subset's are estimates at the
// whole split's tokens per word and per byte, and say so.
std::string per_word_text(const EvalResult& e) {
  const std::optional<double> word = e.word_perplexity(), bits = e.bits_per_byte();
  if (!word || !bits || !std::isfinite(*bits)) return "";
  const std::string unknown =
      e.unknown_fraction >= 0 ? str_cat(format_percent(e.unknown_fraction), " <unk>") : "";
  const std::string note =
      e.subset ? str_cat("estimates at the whole split's tokens per word and per byte",
                         unknown.empty() ? "" : "; ", unknown)
               : unknown;
  return str_cat(" | valid ", *word, " per word, ", *bits, " bits/byte",
                 note.empty() ? std::string() : str_cat(" (", note, ")"));
}

// The attack's realised swap fraction over the first `sequences` sequences of `set` (the attack is
// a function of each token's position, so attacking them alone swaps what attacking the whole
// split swapped there).
StatusOr<double> subset_swap_fraction(const data::SequenceSet& set, int64_t sequences,
                                      const TrainConfig& t, const data::Vocabulary& vocab) {
  MOE_ASSIGN_OR_RETURN(const std::vector<int32_t> tokens, set.leading_tokens(sequences));
  MOE_ASSIGN_OR_RETURN(const data::AttackResult a,
                       data::attack_tokens(tokens, t.attack_rate, t.attack_seed, vocab));
  return a.swap_fraction;
}

}  // namespace

Trainer::Trainer(const RunConfig& cfg, const TrainerOptions& opts, comm::Communicator* world)
    : cfg_(cfg), opts_(opts), world_(world) {}

Trainer::~Trainer() {
  // Copies from the staging memory and a graph's replay end before their memory is freed.
  if (ctx_ != nullptr) ctx_->synchronize().ignore_error();
}

StatusOr<std::unique_ptr<Trainer>> Trainer::create(const RunConfig& cfg, const TrainerOptions& opts,
                                                   comm::Communicator* world) {
  std::unique_ptr<Trainer> t(new Trainer(cfg, opts, world));
  const Status set_up = t->setup();
  if (set_up.ok()) return t;
  // A refused run leaves no run directory behind that it created (one stopped by a signal keeps
  // its partly prepared data: the rerun resumes it). The trainer's files are closed first.
  std::unique_ptr<RunSession> session = std::move(t->session_);
  t.reset();
  if (session != nullptr && set_up.code() != StatusCode::kAborted) {
    session->discard_created_directory();
  }
  return set_up;
}

Status Trainer::setup() {
  const int ranks = world_ == nullptr ? 1 : world_->world_size();
  // The run directory: one job at a time, crash leftovers recovered, an earlier run moved aside
  // by --fresh; rank 0 does it and every rank learns the verdict.
  SessionOptions session;
  session.run_dir = opts_.run_dir;
  session.resume = opts_.resume;
  session.resume_from = opts_.resume_from;
  session.allow_config_change = opts_.allow_config_change;
  session.progress = opts_.progress;
  if (!opts_.dry_run) {
    MOE_ASSIGN_OR_RETURN(session_, RunSession::open(session, world_));
  }
  const bool writes_stats = !opts_.dry_run && (world_ == nullptr || world_->rank() == 0);
  coordinator_ = std::make_unique<Coordinator>(
      cfg_, world_, writes_stats ? opts_.run_dir + "/stats.pb" : "", opts_.progress);
  MOE_RETURN_IF_ERROR(coordinator_->verify_same_config(cfg_.text));

  // Layout: world = EP x DP; every world rank holds an equal slice of each micro-batch.
  if (world_ != nullptr && ranks > 1) {
    comm::ProcessGroupOptions layout;
    layout.ep_size = cfg_.parallel.ep;
    layout.placement = cfg_.parallel.placement;
    layout.hierarchical_all_to_all = cfg_.parallel.hierarchical_all_to_all;
    layout.host = opts_.host_name;
    MOE_ASSIGN_OR_RETURN(groups_, comm::make_process_groups(world_, layout));
    has_groups_ = true;
    // From here on each rank is its layout position (comm/placement.h): the world in layout
    // order (whose rank 0 is the world's) hands out the batch slices and orders every reduction
    // and gather, so a placement changes which process computes a part, not what it computes.
    world_ = groups_.layout_world();
    coordinator_->set_world(world_);
  } else if (cfg_.parallel.ep != 1) {
    return invalid_argument_error("--ep ", cfg_.parallel.ep, " needs ", cfg_.parallel.ep,
                                  " ranks, but this is a single process (launch with mpirun)");
  }
  // Config checks against the world size: every rank computes the same verdict (printed once).
  MOE_RETURN_IF_ERROR(cfg_.train.check_batch_split(ranks).as_job_wide());
  micro_batch_per_rank_ = cfg_.train.micro_batch_per_rank(ranks);
  MOE_RETURN_IF_ERROR(load_data());
  MOE_RETURN_IF_ERROR(open_device());
  MOE_RETURN_IF_ERROR(check_memory_fits());
  MOE_RETURN_IF_ERROR(build_model());
  // The resolved config now that the vocabulary size is known: what checkpoints store.
  cfg_.text = resolved_config_text(cfg_);
  if (!opts_.dry_run) MOE_RETURN_IF_ERROR(resume_or_start());
  if (world_ == nullptr || world_->rank() == 0) {
    for (const std::string& line :
         startup_banner(cfg_, world_, device_, *data_, *model_, memory_estimate_)) {
      coordinator_->print(line);
    }
    if (has_groups_ && (cfg_.parallel.placement != Placement::kRankOrder ||
                        cfg_.parallel.hierarchical_all_to_all)) {
      coordinator_->print("momoe: layout: " + groups_.description);
    }
    for (const std::string& line : config_warnings(cfg_)) log_warning(line);
  }
  if (!opts_.dry_run) set_up_flops_report();
  // A device backend's collectives never block the host: the watchdog bounds each step, save
  // and evaluation (generously: it times the whole section, first-step set-up included).
  if (world_ != nullptr && world_->memory_space() == comm::MemorySpace::kDevice) {
    watchdog_ = std::make_unique<comm::Watchdog>(
        std::vector<comm::Communicator*>{
            world_, has_groups_ ? groups_.ep.get() : nullptr,
            has_groups_ ? groups_.dp.get() : nullptr,
            has_groups_ && groups_.ordered_world ? groups_.world : nullptr},
        std::max(cfg_.parallel.setup_timeout_seconds, cfg_.parallel.timeout_seconds));
  }
  // Set-up ran under the (long) setup timeout; the step's collectives get the short one, so a
  // rank that stops responding is named within seconds.
  set_collective_timeout(cfg_.parallel.timeout_seconds);
  return Status::OK();
}

Status Trainer::load_data() {
  std::function<bool()> stop;
  if (opts_.stop_requested) stop = [this] { return opts_.stop_requested() != 0; };
  MOE_ASSIGN_OR_RETURN(const std::string data_dir, data_directory());
  // Ranks other than 0 read their own host's copy of the data: one verdict for every rank
  // (comm/agree.h), so that a rank whose copy does not fit leaves no peer waiting and the error
  // is printed once.
  MOE_RETURN_IF_ERROR(agree(world_, read_data(data_dir, stop)));
  fingerprints_ = corpus_fingerprints(data_->corpus);  // the corpus does not change during a run
  return Status::OK();
}

Status Trainer::read_data(const std::string& data_dir, const std::function<bool()>& stop) {
  MOE_ASSIGN_OR_RETURN(data_, load_run_data(cfg_, data_dir, world_, stop));
  const int64_t vocab = data_->corpus.tokenizer->size();
  if (cfg_.model.vocab_size == 0) {
    cfg_.model.vocab_size = vocab;
  } else if (cfg_.model.vocab_size != vocab) {
    return invalid_argument_error("model.vocab_size = ", cfg_.model.vocab_size,
                                  " does not match the ", data_->corpus.tokenizer->describe(),
                                  " of ", data_->corpus.vocab_source);
  }
  MOE_RETURN_IF_ERROR(cfg_.model.validate(cfg_.parallel.ep));
  if (!data_->train) return invalid_argument_error("no training split");
  return Status::OK();
}

StatusOr<std::string> Trainer::data_directory() {
  std::error_code ec;
  if (!opts_.dry_run || !cfg_.data.cache_dir.empty() ||
      std::filesystem::is_directory(opts_.run_dir + "/cache", ec)) {
    return opts_.run_dir;
  }
  MOE_ASSIGN_OR_RETURN(dry_run_data_dir_, io::TempDir::create("momoe-dry-run"));
  return dry_run_data_dir_.path();
}

Status Trainer::open_device() {
  const int ranks = world_ == nullptr ? 1 : world_->world_size();
  const int rank = world_ == nullptr ? 0 : world_->rank();
  const TrainConfig& t = cfg_.train;
  ContextOptions context = opts_.context;
  const bool ranks_are_threads = world_ != nullptr && world_->ranks_are_threads();
  context.threads = cfg_.parallel.threads > 0 ? cfg_.parallel.threads
                                              : default_threads(ranks_are_threads ? ranks : 1);
  if (t.device == DeviceKind::kCuda && ranks_are_threads && ranks > 1) {
    return invalid_argument_error(
        "train.device = CUDA with ranks that are threads (the local "
        "backend moves host memory only): GPU ranks use MPI or NCCL");
  }
  // The one choice of device (every rank learns if any rank could not get its device).
  StatusOr<RunDevice> device = make_run_device(t.device, context, rank);
  MOE_RETURN_IF_ERROR(agree(world_, device.status()));
  device_ = std::move(*device);
  ctx_ = std::move(device_.ctx);
  phase_timer_ = std::make_unique<PhaseTimer>(ctx_.get());
  if (t.device == DeviceKind::kCpu) {
    // Every process says so, once, when its BLAS kernel does not use its CPU's vector ISA (ranks
    // may run on different CPUs); rank 0 names the CPU and the kernel in the start-up banner.
    static std::once_flag blas_warned;
    std::call_once(blas_warned, [rank] { kernels::ref::print_blas_warning(rank); });
  }
  return Status::OK();
}

Status Trainer::build_model() {
  const TrainConfig& t = cfg_.train;
  MOE_ASSIGN_OR_RETURN(model_,
                       TransformerLM::create(cfg_.model, ctx_.get(), activation_dtype(t.precision),
                                             has_groups_ ? groups_.ep.get() : nullptr));
  MOE_RETURN_IF_ERROR(model_->init_parameters(t.seed));
  std::optional<StateSharding> sharding;  // train.distributed_optimizer: over the DP replicas
  if (t.distributed_optimizer && has_groups_) {
    MOE_ASSIGN_OR_RETURN(sharding,
                         shard_optimizer_state(&model_->params(), world_, groups_.dp.get()));
  }
  MOE_ASSIGN_OR_RETURN(optimizer_, Optimizer::create(t.optimizer, &model_->params(),
                                                     sharding ? &*sharding : nullptr));
  MOE_ASSIGN_OR_RETURN(data::BatchScheduler sched,
                       data::BatchScheduler::create(data_->train->size(), t.batch_size, t.seed));
  scheduler_.emplace(std::move(sched));
  return make_step_buffers();
}

Status Trainer::make_step_buffers() {
  const TrainConfig& t = cfg_.train;
  const StepBuffer slots(model_->num_moe_layers());
  MOE_ASSIGN_OR_RETURN(step_buffer_, ctx_->zeros({slots.size(*model_)}, DType::kF64));
  const Shape batch{t.grad_accum * micro_batch_per_rank_, cfg_.model.seq_len};
  MOE_ASSIGN_OR_RETURN(batch_inputs_, ctx_->staging(batch, DType::kI32));
  MOE_ASSIGN_OR_RETURN(batch_targets_, ctx_->staging(batch, DType::kI32));
  MOE_ASSIGN_OR_RETURN(step_flags_, ctx_->staging({2}, DType::kF64));
  MOE_ASSIGN_OR_RETURN(step_keys_, ctx_->zeros({2}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(step_keys_staged_, ctx_->staging({2}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(device_step_, kernels::device_step(*ctx_, step_keys_));
  if (!t.cuda_graphs || opts_.host_step_keys) return Status::OK();
  const bool host_collectives =
      world_ != nullptr && world_->memory_space() != comm::MemorySpace::kDevice;
  const std::string refusal = step_graph_refusal(
      cfg_, ctx_->device(), world_ == nullptr ? 1 : world_->world_size(), host_collectives);
  if (refusal.empty()) {
    step_graph_ = std::make_unique<StepGraph>();
  } else if (ctx_->device().is_cuda() && (world_ == nullptr || world_->rank() == 0)) {
    // On by default: a GPU run it does not apply to says why (train.cuda_graphs=false silences
    // it); the CPU has no graphs and nothing to say.
    log_info("train.cuda_graphs: not used (", refusal, "); every step runs eagerly");
  }
  return Status::OK();
}

Status Trainer::resume_or_start() {
  // Resume from the newest checkpoint of the run directory (or the one named).
  MOE_ASSIGN_OR_RETURN(std::string resume, session_->choose_resume(cfg_, fingerprints_));
  if (!resume.empty()) {
    Status restored =
        restore_checkpoint(resume, training_state(), world_, has_groups_ ? &groups_ : nullptr);
    const bool leader = world_ == nullptr || world_->rank() == 0;
    if (!restored.ok() && leader && restored.code() == StatusCode::kDataLoss &&
        opts_.resume_from.empty()) {
      restored = ckpt::damaged_checkpoint_error(opts_.run_dir, resume, restored);
    }
    MOE_RETURN_IF_ERROR(restored);
    resumed_from_ = resume;
    coordinator_->print(str_cat("momoe: resumed from ", resume, " at step ", steps_done()));
  }
  MOE_RETURN_IF_ERROR(session_->start_lineage(resume, coordinator_.get()));
  if (!resume.empty()) coordinator_->report_resume(steps_done());
  coordinator_->report_start(steps_done());
  return Status::OK();
}

void Trainer::set_up_flops_report() {
  const int ranks = world_ == nullptr ? 1 : world_->world_size();
  double peak = 0;
  if (cfg_.train.device == DeviceKind::kCuda && (world_ == nullptr || world_->rank() == 0)) {
    const DType dtype = activation_dtype(cfg_.train.precision);
    // Measured only where its three 4096 x 4096 matrices leave the run's estimate room (twice
    // over), so that the measurement never costs the run its memory.
    const int64_t n = 4096, matrices = 3 * n * n * static_cast<int64_t>(dtype_size(dtype));
    const bool room = device_.available_bytes < 0 ||
                      device_.available_bytes - memory_estimate_.total() > 2 * matrices;
    StatusOr<double> rate = room ? measure_gemm_rate(*ctx_, dtype, n)
                                 : StatusOr<double>(failed_precondition_error(
                                       "no memory to spare for measuring the GPU's GEMM rate"));
    if (rate.ok()) {
      peak = *rate * ranks;
      coordinator_->print(str_cat("momoe: ", device_.description, " reaches ",
                                  si_count(*rate, "FLOP/s"), " on a ", dtype_name(dtype),
                                  " GEMM (measured; the MFU in progress lines is against it x ",
                                  ranks, " rank(s))"));
    } else {
      log_warning(rate.status().to_string(), " (the progress lines show no MFU)");
    }
  }
  coordinator_->set_compute(model_size(cfg_.model).train_flops_per_token, peak);
}

void Trainer::set_collective_timeout(double seconds) {
  if (world_ != nullptr) world_->set_timeout(seconds);
  if (has_groups_) {
    groups_.world->set_timeout(seconds);  // the world as given (world_ is it in layout order)
    groups_.ep->set_timeout(seconds);
    groups_.dp->set_timeout(seconds);
  }
}

Status Trainer::check_memory_fits() {
  const int ranks = world_ == nullptr ? 1 : world_->world_size();
  // Every rank says where it runs and which memory it draws on; rank 0 counts the ranks per
  // memory (a host's RAM, one GPU) and checks each against the per-rank estimate.
  const std::string mine = this_rank_place(device_).to_text();
  std::vector<std::string> all = {mine};
  if (world_ != nullptr && ranks > 1) {
    MOE_ASSIGN_OR_RETURN(all, world_->gather_bytes(mine, 0));
  }
  Status fits = Status::OK();
  if (world_ == nullptr || world_->rank() == 0) {
    MemoryEstimate per_rank = estimate_training_memory(cfg_, ranks);
    // The GPU's own scratch (attention scores, cuBLAS workspace) counts as activations.
    per_rank.device_scratch_bytes = device_scratch_bytes(cfg_, ranks);
    per_rank.activation_bytes += per_rank.device_scratch_bytes;
    memory_estimate_ = per_rank;
    fits = check_memory_per_pool(all, per_rank);
  }
  return agree(world_, fits);
}

Status Trainer::check_memory_per_pool(const std::vector<std::string>& places_text,
                                      const MemoryEstimate& per_rank) {
  std::vector<RankPlace> places;
  for (const std::string& text : places_text) {
    MOE_ASSIGN_OR_RETURN(places.emplace_back(), RankPlace::from_text(text));
  }
  const std::vector<MemoryPool> pools = memory_pools(places);
  for (const MemoryPool& p : pools) {
    const int shared = static_cast<int>(p.ranks.size());
    MemoryEstimate need = per_rank;
    need.parameter_bytes *= shared;
    need.gradient_bytes *= shared;
    need.optimizer_bytes *= shared;
    need.activation_bytes *= shared;
    if (p.available < 0 || need.total() <= p.available) continue;
    // Refused: name the settings that would fit this pool.
    const int ranks = static_cast<int>(places.size());
    const auto bytes_on_pool = [&](const RunConfig& c) {
      const MemoryEstimate e = estimate_training_memory(c, ranks);
      return (e.total() + device_scratch_bytes(c, ranks)) * shared;
    };
    return check_memory(
        need, p.available, shared > 1 ? str_cat(p.name, " (shared by ", shared, " ranks)") : p.name,
        fitting_settings_text(settings_that_fit(cfg_, ranks, p.available, bytes_on_pool)));
  }
  if (places.size() > 1) coordinator_->print(placement_line(places));
  coordinator_->print(memory_check_line(pools, per_rank.total()));
  return Status::OK();
}

TrainingState Trainer::training_state() {
  TrainingState st;
  st.cfg = &cfg_;
  st.model = model_.get();
  st.optimizer = optimizer_.get();
  st.scheduler = &*scheduler_;
  st.updates = &updates_;
  st.tokenizer = data_->corpus.tokenizer.get();
  st.vocab_source = data_->corpus.vocab_source;
  const Lineage& lineage = session_->lineage();
  st.run_id = lineage.run_id;
  st.branch = lineage.branch;
  st.parent = lineage.parent;
  st.lineage = lineage.ancestors;
  st.extra = fingerprints_;
  return st;
}

StatusOr<std::string> Trainer::save() {
  // Writing shards to a slow file system can take far longer than a step.
  set_collective_timeout(cfg_.parallel.setup_timeout_seconds);
  if (watchdog_) watchdog_->arm(str_cat("saving the checkpoint of step ", steps_done()));
  StatusOr<std::string> saved =
      save_checkpoint(opts_.run_dir, training_state(), world_, has_groups_ ? &groups_ : nullptr,
                      cfg_.train.keep_checkpoints);
  if (watchdog_) watchdog_->disarm();
  set_collective_timeout(cfg_.parallel.timeout_seconds);
  MOE_ASSIGN_OR_RETURN(std::string dir, std::move(saved));
  last_save_time_ = std::chrono::steady_clock::now();
  if (skipped_streak_ == 0) last_good_checkpoint_ = dir;
  coordinator_->print(str_cat("momoe: checkpoint ", dir));
  return dir;
}

int64_t Trainer::eval_sequences_in_pass(bool whole_splits) const {
  const int64_t max_sequences = whole_splits ? 0 : cfg_.train.eval_sequences;
  int64_t n = 0;
  for (const std::optional<data::SequenceSet>* set :
       {&data_->valid, &data_->test, &data_->attacked_valid_seq, &data_->attacked_test_seq}) {
    if (!*set) continue;
    n += max_sequences > 0 ? std::min(max_sequences, (*set)->size()) : (*set)->size();
  }
  return n;
}

double Trainer::evaluation_eta(int64_t done, double step_seconds) const {
  const TrainConfig& t = cfg_.train;
  const double per_sequence =
      eval_seconds_per_sequence_ > 0
          ? eval_seconds_per_sequence_
          : step_seconds / static_cast<double>(std::max<int64_t>(1, t.batch_size)) / 3.0;
  int64_t sequences = 0;
  if (t.eval_every > 0 && done < t.steps) {
    const int64_t periodic = (t.steps - 1) / t.eval_every - done / t.eval_every;
    sequences += std::max<int64_t>(0, periodic) * eval_sequences_in_pass(false);
  }
  const bool subset = eval_sequences_in_pass(false) < eval_sequences_in_pass(true);
  switch (t.final_eval) {
    case FinalEval::kNone:
      break;
    case FinalEval::kSubset:
      sequences += eval_sequences_in_pass(false);
      break;
    case FinalEval::kWhole:
      sequences += eval_sequences_in_pass(true);
      break;
    case FinalEval::kBoth:
      sequences += eval_sequences_in_pass(false) + (subset ? eval_sequences_in_pass(true) : 0);
      break;
  }
  return per_sequence * static_cast<double>(sequences);
}

StatusOr<EvalReport> Trainer::evaluate(bool whole_splits) {
  if (watchdog_) watchdog_->arm(str_cat("the evaluation at step ", steps_done()));
  StatusOr<EvalReport> r = evaluate_impl(whole_splits);
  if (watchdog_) watchdog_->disarm();
  // A recorded step keeps its memory in the graph's own pool: what the evaluation left cached in
  // the context's goes back (one wait per evaluation; step_graph.h).
  if (step_graph_ != nullptr && step_graph_->nodes() > 0) ctx_->allocator().release_cached();
  return r;
}

StatusOr<EvalReport> Trainer::evaluate_impl(bool whole_splits) {
  EvalReport r;
  const TrainConfig& t = cfg_.train;
  const int64_t batch = std::max<int64_t>(1, micro_batch_per_rank_);
  const int64_t max_sequences = whole_splits ? 0 : t.eval_sequences;
  // Progress: a line every 10 s (sequences done of this evaluation's, tokens/s, ETA);
  // $MOMOE_PROGRESS_SECONDS changes the interval (tests: 0, a line per round).
  const double interval = progress_interval_seconds(10);
  const auto t0 = std::chrono::steady_clock::now();
  auto last_print = t0;
  const int64_t total = eval_sequences_in_pass(whole_splits);
  int64_t done_before = 0;
  auto run = [&](const std::optional<data::SequenceSet>& set,
                 std::optional<EvalResult>* out) -> Status {
    if (!set) return Status::OK();
    const auto progress = [&](int64_t done, int64_t) {
      const auto now = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(now - last_print).count() < interval) return;
      last_print = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      const double rate = static_cast<double>(done_before + done) / std::max(s, 1e-9);
      coordinator_->print(str_cat(
          "eval at step ", steps_done(), ": ", done_before + done, "/", total, " sequences (",
          set->source(), "), ",
          static_cast<int64_t>(rate * static_cast<double>(cfg_.model.seq_len)), " tok/s, ETA ",
          format_duration(static_cast<double>(total - done_before - done) / rate)));
    };
    std::function<bool()> stop;
    if (opts_.stop_requested) {
      stop = [this] {
        if (stop_local_ == 0) stop_local_ = opts_.stop_requested();
        return stop_local_ != 0;
      };
    }
    MOE_ASSIGN_OR_RETURN(EvalResult e,
                         evaluate_perplexity(model_.get(), *set,
                                             {batch, max_sequences, t.seed, world_, stop, progress,
                                              nullptr, data_->corpus.tokenizer->unk_id()}));
    done_before += max_sequences > 0 ? std::min(max_sequences, set->size()) : set->size();
    if (e.stopped) {
      r.stopped = true;
    } else {
      *out = e;
    }
    return Status::OK();
  };
  for (auto [set, out] : {std::pair{&data_->valid, &r.valid}, std::pair{&data_->test, &r.test},
                          std::pair{&data_->attacked_valid_seq, &r.attacked_valid},
                          std::pair{&data_->attacked_test_seq, &r.attacked_test}}) {
    MOE_RETURN_IF_ERROR(run(*set, out));
    if (r.stopped) return r;
  }
  r.attack_rate = data_->attacked_valid_rate;
  if (r.attacked_valid && r.attacked_valid->subset) {
    MOE_ASSIGN_OR_RETURN(r.attack_rate,
                         subset_swap_fraction(*data_->valid, max_sequences, t,
                                              data_->corpus.tokenizer->vocabulary()));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (total > 0) eval_seconds_per_sequence_ = seconds / static_cast<double>(total);
  report_evaluation(r, max_sequences, seconds);
  return r;
}

void Trainer::report_evaluation(const EvalReport& r, int64_t max_sequences, double seconds) {
  const TrainConfig& t = cfg_.train;
  coordinator_->note_evaluation(seconds);
  StepStatsInfo record;
  record.step = steps_done();
  record.rank = -1;
  record.eval_sequences = max_sequences;
  record.eval_seconds = seconds;
  if (r.valid) record.valid_ppl = r.valid->perplexity();
  if (r.test) record.test_ppl = r.test->perplexity();
  if (r.attacked_valid) record.attacked_valid_ppl = r.attacked_valid->perplexity();
  if (r.attacked_test) record.attacked_test_ppl = r.attacked_test->perplexity();
  if (r.attacked_valid || r.attacked_test) record.attack_rate = r.attack_rate;
  if (r.valid) {
    record.valid_word_ppl = r.valid->word_perplexity();
    record.valid_bits_per_byte = r.valid->bits_per_byte();
    if (r.valid->unknown_fraction >= 0) record.valid_unknown_fraction = r.valid->unknown_fraction;
  }
  if (r.test) {
    record.test_word_ppl = r.test->word_perplexity();
    record.test_bits_per_byte = r.test->bits_per_byte();
    if (r.test->unknown_fraction >= 0) record.test_unknown_fraction = r.test->unknown_fraction;
  }
  coordinator_->report_eval(record);
  auto fmt = [](const std::optional<EvalResult>& e) {
    return !e                               ? std::string("-")
           : std::isfinite(e->perplexity()) ? str_cat(e->perplexity())
                                            : std::string("non-finite");
  };
  const bool subset = max_sequences > 0 && r.valid && data_->valid->size() > max_sequences;
  const std::string what =
      subset ? str_cat(" (first ", max_sequences, " sequences of each split)")
             : (t.eval_sequences > 0 ? std::string(" (whole splits)") : std::string());
  coordinator_->print(
      str_cat("eval at step ", steps_done(), what, ": valid ppl ", fmt(r.valid), " | test ppl ",
              fmt(r.test),
              r.attacked_valid || r.attacked_test
                  ? str_cat(" | attacked (", cfg_.train.attack_rate, " word swaps, realised ",
                            r.attack_rate, ") valid ppl ", fmt(r.attacked_valid), " | test ppl ",
                            fmt(r.attacked_test))
                  : std::string(),
              r.valid ? per_word_text(*r.valid) : std::string()));
}

Status Trainer::run() {
  if (opts_.dry_run) return failed_precondition_error("a dry run trains nothing");
  const TrainConfig& t = cfg_.train;
  int64_t saved_at = -1;
  if (!resumed_from_.empty()) last_good_checkpoint_ = resumed_from_;
  last_save_time_ = std::chrono::steady_clock::now();  // the start counts as a save
  while (steps_done() < t.steps) {
    MOE_RETURN_IF_ERROR(step().status());
    const int64_t done = steps_done();
    if (opts_.after_step) opts_.after_step(done);
    if (t.max_skipped_steps > 0 && skipped_streak_ >= t.max_skipped_steps) {
      return diverged_error(str_cat(" (train.max_skipped_steps = ", t.max_skipped_steps, ")"));
    }
    if (stop_agreed_) break;
    if (skipped_streak_ > 0) continue;  // no checkpoint (nor pruning) while steps are skipped
    if (save_due_ || (t.checkpoint_every > 0 && done % t.checkpoint_every == 0)) {
      MOE_RETURN_IF_ERROR(save().status());
      saved_at = done;
    }
    if (t.eval_every > 0 && done % t.eval_every == 0 && done < t.steps) {
      MOE_ASSIGN_OR_RETURN(EvalReport r, evaluate());
      if (r.stopped) {
        stop_agreed_ = true;
        break;
      }
    }
  }
  if (saved_at != steps_done()) {
    if (skipped_streak_ == 0) {
      MOE_RETURN_IF_ERROR(save().status());
    } else {
      coordinator_->print(str_cat("momoe: no checkpoint at step ", steps_done(), ": its last ",
                                  skipped_streak_, " step(s) were skipped as non-finite"));
    }
  }
  coordinator_->flush();
  // A run whose last steps were skipped ends diverged, whatever stopped it: never exit 0 with
  // weights that are not finite.
  if (skipped_streak_ > 0) return diverged_error(" at the end of the run");
  if (stop_agreed_) {
    coordinator_->print(str_cat("momoe: stopped after step ", steps_done(), " of ", t.steps,
                                " on a stop request (",
                                stop_local_ != 0 ? "this rank" : "another rank",
                                " was signalled); rerun the same command to resume"));
    return Status::OK();
  }
  return final_evaluations();
}

Status Trainer::diverged_error(const std::string& where) const {
  const int64_t done = steps_done();
  return aborted_error(
      skipped_streak_, " consecutive step(s) (", done - skipped_streak_ + 1, " to ", done,
      ") were skipped as non-finite", where, ": training diverged, and no checkpoint was written ",
      "since. ",
      last_good_checkpoint_.empty()
          ? std::string("No checkpoint was saved before them: start again with another "
                        "config (e.g. a lower train.optimizer.lr)")
          : str_cat("The last checkpoint saved before them is ", last_good_checkpoint_,
                    ": resume from it with --resume-from ", last_good_checkpoint_,
                    " and a config that does not diverge (e.g. a lower "
                    "train.optimizer.lr, with --allow-config-change)"));
}

Status Trainer::final_evaluations() {
  const TrainConfig& t = cfg_.train;
  // The final numbers (over the whole splits too, beside the subset the run tracked). The
  // checkpoint is saved: a stop request ends the evaluation at once.
  const bool subset = eval_sequences_in_pass(false) < eval_sequences_in_pass(true);
  std::vector<bool> passes;  // whole_splits of each final evaluation
  switch (t.final_eval) {
    case FinalEval::kBoth:
      passes = subset ? std::vector<bool>{false, true} : std::vector<bool>{true};
      break;
    case FinalEval::kSubset:
      passes = {false};
      break;
    case FinalEval::kWhole:
      passes = {true};
      break;
    case FinalEval::kNone:
      coordinator_->print(
          str_cat("momoe: no final evaluation (train.final_eval = NONE); evaluate "
                  "the checkpoint of step ",
                  steps_done(), " with momoe-eval"));
      break;
  }
  for (bool whole : passes) {
    // A rerun (of a finished run, or of one stopped during its final evaluation) does not
    // repeat an evaluation stats.pb holds already: metrics.jsonl would get it twice.
    const int64_t sequences = whole ? 0 : t.eval_sequences;
    MOE_ASSIGN_OR_RETURN(const bool recorded,
                         coordinator_->has_evaluation(steps_done(), sequences));
    if (recorded) {
      coordinator_->print(str_cat(
          "momoe: the final evaluation at step ", steps_done(),
          whole ? " over the whole splits" : str_cat(" over the first ", sequences, " sequences"),
          " is recorded in stats.pb already: not repeated (momoe-stats shows it; momoe-eval "
          "evaluates the checkpoint again)"));
      continue;
    }
    MOE_ASSIGN_OR_RETURN(EvalReport r, evaluate(whole));
    if (!r.stopped && !r.finite()) {
      return aborted_error("the final evaluation at step ", steps_done(),
                           " gave a non-finite perplexity: the model's outputs are not finite "
                           "(training diverged). The checkpoint of step ",
                           steps_done(),
                           " holds those weights; start again from an earlier "
                           "checkpoint or with a lower train.optimizer.lr");
    }
    if (r.stopped) {
      stop_agreed_ = true;
      coordinator_->print(str_cat("momoe: stopped the final evaluation on a stop request (",
                                  stop_local_ != 0 ? "this rank" : "another rank",
                                  " was signalled); the checkpoint of step ", steps_done(),
                                  " is saved: evaluate it with momoe-eval"));
      return Status::OK();
    }
  }
  return Status::OK();
}

}  // namespace moe
