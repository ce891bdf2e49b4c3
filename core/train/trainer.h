// The training loop of one rank. Every rank of the job runs a Trainer over the same config; the
// communicators make it EP x DP parallel:
//   - each step's global batch (batch_size sequences from the seeded scheduler) is cut into
//     grad_accum micro-batches, and each micro-batch into equal contiguous slices per world rank
//     in layout order (comm/process_groups.h: the world rank itself under the default
//     placement), so the sequences a step trains on do not depend on the layout;
//   - the objective is mean(token cross-entropy over the global batch) + mean over micro-batches
//     of the MoE layers' aux losses; dense gradients are summed over the world and expert
//     gradients over the DP group (under train.distributed_optimizer reduce-scattered, each rank
//     then updating its chunk with its share of the optimizer state: core/optim/state_sharding.h);
//   - a non-finite loss or gradient norm skips the update (reported as an anomaly);
//   - device-neutral: every rank owns one Context (train.device, train.precision); losses,
//     gradient norms and router statistics accumulate in one device step buffer that is read
//     back once per step, right before the optimizer update (the step's only wait in capacity
//     mode; a dropless MoE layer adds one small counts read per forward);
//   - rank 0's Coordinator writes stats.pb and prints progress; evaluation reports clean and
//     word-swap-attacked perplexity;
//   - the run directory belongs to this job (rank 0 holds RUN_DIR/lock); at start-up rank 0
//     recovers what a crash interrupted, and a resumed run lists every config field that changed
//     since its checkpoint and refuses changes to what training computes unless allowed;
//   - a stop request on any rank (a signal) ends every rank after the same step, with a
//     checkpoint.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/context.h"
#include "base/phase_timer.h"
#include "comm/communicator.h"
#include "comm/process_groups.h"
#include "comm/watchdog.h"
#include "core/checkpoint/training_checkpoint.h"
#include "core/data/batch_scheduler.h"
#include "core/model/transformer.h"
#include "core/optim/optimizer.h"
#include "core/train/coordinator.h"
#include "core/train/evaluator.h"
#include "core/train/memory_estimate.h"
#include "core/train/run_data.h"
#include "core/train/run_device.h"
#include "core/train/run_session.h"
#include "core/train/step_graph.h"
#include "io/file_util.h"
#include "types/run_config.h"

namespace moe {

struct TrainerOptions {
  std::string run_dir;  // statistics, checkpoints and the token cache go here
  // Continue from the newest checkpoint in run_dir when present. false (--fresh): start a new
  // run, moving an earlier run's checkpoints and stats.pb to run_dir/archive/ first.
  bool resume = true;
  // Resume from this checkpoint directory instead (e.g. an older one when the newest is damaged).
  std::string resume_from;
  // Resume even when the config changes what training computes (every changed field is printed
  // either way; see changes_training in proto/run_convert.h).
  bool allow_config_change = false;
  // Polled at every step: non-zero (a signal number) asks the job to stop. Any rank's request
  // stops every rank after the same step, with a checkpoint (see stopped()).
  std::function<int()> stop_requested;
  std::FILE* progress = stdout;  // rank 0's progress lines (nullptr: silent)
  // The host context's options (tests guard host access to its tensors); its thread count comes
  // from parallel.threads.
  ContextOptions context;
  // Called after every completed step with the number of steps done (fault injection, hooks).
  std::function<void(int64_t)> after_step;
  // A dry run (momoe-train --dry-run): create() checks the config, the data and its vocabulary,
  // the layout against the ranks and the memory, builds the model and prints the start-up
  // summary, but run_dir is neither created nor taken, nothing is resumed, and no statistics or
  // checkpoints are written; run() refuses. The token cache goes to data.cache_dir when set,
  // else to run_dir/cache when that exists, else to a temporary directory removed with the
  // trainer.
  bool dry_run = false;
  // Tests: key the step's random draws with the step on the host (StepContext::step and the
  // whole sequence offset) instead of the step in device memory that every training step reads
  // (StepContext::device_step, which a CUDA graph of the step needs). The same draws either way;
  // train.cuda_graphs does not apply.
  bool host_step_keys = false;
  // This rank's host name for parallel.placement = HOSTS and the hierarchical all-to-all (empty:
  // the machine's, which MOMOE_HOST_NAME overrides). Ranks that are threads of one process (the
  // Local backend's tests) pose as several hosts here.
  std::string host_name;
};

struct EvalReport {
  std::optional<EvalResult> valid, test, attacked_valid, attacked_test;
  // The attack's realised swap fraction over the valid split, or over the subset evaluated.
  double attack_rate = 0;
  bool stopped = false;  // a stop request ended it early: no numbers, nothing recorded
  // Every perplexity it has is finite (a diverged model's are not).
  bool finite() const {
    for (const auto* e : {&valid, &test, &attacked_valid, &attacked_test}) {
      if (*e && !std::isfinite((*e)->perplexity())) return false;
    }
    return true;
  }
};

class Trainer {
 public:
  // world: nullable for a single process. Collective: checks the config across ranks, loads the
  // data, builds and initialises the model (or restores the newest checkpoint). A run refused
  // here (not one stopped by a signal) removes the run directory when this call created it
  // (RunSession::discard_created_directory); one that existed is left as it was.
  static StatusOr<std::unique_ptr<Trainer>> create(const RunConfig& cfg, const TrainerOptions& opts,
                                                   comm::Communicator* world);
  ~Trainer();

  // Trains until cfg.train.steps, evaluating and checkpointing as configured, or until a stop is
  // requested (then it saves a checkpoint after the step in flight and returns OK with
  // stopped() true; no final evaluation). A stop during an evaluation ends the evaluation (the
  // final one: the checkpoint is already saved) and the run the same way. Collective.
  Status run();
  // Whether run() ended on a stop request, and the signal this rank received (0 when the request
  // came from another rank).
  bool stopped() const { return stop_agreed_; }
  int stop_signal() const { return stop_local_; }
  // One optimiser step; returns the aggregated statistics on rank 0 (this rank's elsewhere).
  StatusOr<StepStatsInfo> step();
  // Perplexities on valid and test, clean and attacked, over the first train.eval_sequences
  // sequences of each split (all of them with whole_splits, or when eval_sequences is 0).
  // Recorded in stats.pb and printed. Collective.
  StatusOr<EvalReport> evaluate(bool whole_splits = false);
  // Writes RUN_DIR/ckpt-<step>; returns its path. Collective.
  StatusOr<std::string> save();
  // The per-rank memory estimate the memory check used (rank 0; memory_estimate.h).
  const MemoryEstimate& memory_estimate() const { return memory_estimate_; }
  // The checkpoint this trainer resumed from ("" for a fresh start).
  const std::string& resumed_from() const { return resumed_from_; }

  int64_t steps_done() const { return scheduler_->cursor().step; }
  TransformerLM& model() { return *model_; }
  const Optimizer& optimizer() const { return *optimizer_; }
  Context& context() { return *ctx_; }
  const RunConfig& config() const { return cfg_; }
  const RunData& data() const { return *data_; }
  Coordinator& coordinator() { return *coordinator_; }
  // train.cuda_graphs's recorder where it applies (step_graph.h); null where it does not.
  const StepGraph* step_graph() const { return step_graph_.get(); }

 private:
  // The step buffer (f64, on the device; read back once per step): loss sums | gradient squares
  // (dense, expert) | the all-reduced loss sum | ranks asking to stop | rank 0 asking for a
  // checkpoint by time | probe flips per MoE layer | router statistics.
  struct StepBuffer {
    enum : int64_t {
      kLoss = 0,
      kGradSq = TransformerLM::kLossSlots,
      kGlobalLoss = kGradSq + 2,
      kStop = kGlobalLoss + 1,
      kSave = kStop + 1,
      kFlips = kSave + 1
    };
    explicit StepBuffer(int moe_layers) : layers(moe_layers), stats_at(kFlips + moe_layers) {}
    int64_t size(const TransformerLM& model) const { return stats_at + model.stats_size(); }
    TensorView loss_sums(const Tensor& b) const {
      return b.view().rows(kLoss, kLoss + TransformerLM::kLossSlots);
    }
    TensorView flips(const Tensor& b) const { return b.view().rows(kFlips, kFlips + layers); }
    TensorView stats(const Tensor& b) const { return b.view().rows(stats_at, b.numel()); }
    int layers;
    int64_t stats_at;
  };

  Trainer(const RunConfig& cfg, const TrainerOptions& opts, comm::Communicator* world);
  // Set-up, in order: the run session, the layout, the data (and the vocabulary size), the
  // device, the memory check, the model and optimizer, then a resume or a new run's lineage.
  Status setup();
  Status load_data();
  // load_data's part on this rank: the data, the vocabulary size, the model's checks against it.
  Status read_data(const std::string& data_dir, const std::function<bool()>& stop);
  // Where load_data's token cache goes (its cache is DIR/cache): the run directory, or a
  // temporary one for a dry run without a cache (TrainerOptions::dry_run).
  StatusOr<std::string> data_directory();
  Status open_device();
  Status build_model();
  // The step's buffers (step_buffer_ and the staging tensors) and, under train.cuda_graphs where
  // it applies, the StepGraph (a warning says why not where it does not).
  Status make_step_buffers();
  Status resume_or_start();
  // Refuses (on every rank) a run whose estimated memory exceeds what a memory pool (a host's
  // RAM, a GPU) has available for the ranks that share it (memory_estimate.h), before the model
  // is allocated.
  Status check_memory_fits();
  // Rank 0's part of it: the ranks' places (RankPlace::to_text, in world-rank order) grouped per
  // memory pool and each pool checked; then the placement (more than one rank) and the memory
  // check's lines (placement.h).
  Status check_memory_per_pool(const std::vector<std::string>& places_text,
                               const MemoryEstimate& per_rank);
  // Tells the coordinator the training FLOPs per token, and on a GPU the GEMM rate measured on
  // rank 0 (x the ranks) for the MFU: a failed measurement only leaves the MFU out.
  void set_up_flops_report();

  // One step, in stages (trainer_step.cc): the device work (the micro-batches' forward and
  // backward, each batch staged on the host first; gradients accumulated, losses and router
  // statistics into the step buffer; the gradients' reduction over the ranks), replayed as a
  // CUDA graph under train.cuda_graphs; the step buffer shared over the ranks; the one read back;
  // the statistics; the update (skipped when non-finite).
  StatusOr<StepStatsInfo> step_impl();  // step() without the watchdog
  // Each micro-batch's share of the objective: 1 / (ranks x grad_accum).
  double loss_share() const;
  // Fills micro-batch a of scheduler_batch_ (this rank's slice) into batch_inputs_ and
  // batch_targets_ (rows [a m, (a + 1) m), m = micro_batch_per_rank_); returns its loss scale.
  StatusOr<double> stage_micro_batch(int64_t a);
  // The step's device work, eagerly (each micro-batch staged right before its forward) or
  // through step_graph_ (the whole batch staged first: its loss scales are the graph's key).
  Status run_device_work(int64_t step, const StepBuffer& slots);
  // Enqueues the step's device work and never waits; `stage(a)` stages micro-batch a (or has
  // staged it) and gives its loss scale. Reads the host only through the staging tensors.
  Status device_work(int64_t step, const StepBuffer& slots,
                     const std::function<StatusOr<double>(int64_t)>& stage);
  // The stop and save flags (decided now, after the step's compute is enqueued) and the loss,
  // all-reduced over the world, and the expert gradients' squares over the EP group.
  Status share_step_buffer(const StepBuffer& slots);
  StepStatsInfo read_step_stats(int64_t step, const StepBuffer& slots, const double* v,
                                int64_t probe_tokens, std::vector<double>* flips);
  Status apply_update(const StepStatsInfo& stats);
  // The step's memory, measured on the host (no device wait): start_step_memory at the step's
  // start resets the tensor allocator's peak and the process's resident high-water mark (not
  // where ranks are threads: the mark is the process's, and one rank's reset would cut another
  // rank's step short); record_step_memory at its end sets stats->peak_tensor_bytes and
  // peak_rss_bytes.
  void start_step_memory();
  void record_step_memory(StepStatsInfo* stats) const;
  // Probe step: routes the probe batch and counts, per MoE layer, the tokens whose top-1 expert
  // changed since the last probe into flips (f64 [L], on the device). Returns the number of probe
  // tokens, 0 when this step does not probe.
  StatusOr<int64_t> probe_flips(const TensorView& flips);

  StatusOr<EvalReport> evaluate_impl(bool whole_splits);  // evaluate() without the watchdog
  // Records an evaluation in stats.pb and prints its line (max_sequences: 0 for whole splits).
  void report_evaluation(const EvalReport& r, int64_t max_sequences, double seconds);
  // run()'s end: the final evaluations train.final_eval asks for (a stop request ends them).
  Status final_evaluations();
  // The error of a run whose last skipped_streak_ steps were non-finite (`where`: why it ends
  // now), naming the last checkpoint saved before them and what to do.
  Status diverged_error(const std::string& where) const;
  // Sequences one evaluation pass visits (every evaluated split, attacked ones included).
  int64_t eval_sequences_in_pass(bool whole_splits) const;
  // Estimated seconds of the evaluations still to come after `done` steps: the periodic ones
  // and the final ones (train.final_eval), at the last evaluation's seconds per sequence (before
  // any: a third of a training step's per sequence, a forward without backward).
  double evaluation_eta(int64_t done, double step_seconds) const;
  double eval_seconds_per_sequence_ = 0;
  TrainingState training_state();
  // Bounds every later collective of the world and the EP/DP groups: parallel.timeout_seconds
  // in the training loop, parallel.setup_timeout_seconds while saving a checkpoint.
  void set_collective_timeout(double seconds);

  RunConfig cfg_;
  TrainerOptions opts_;
  comm::Communicator* world_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<PhaseTimer> phase_timer_;  // the step's phases (set on ctx_)
  bool phase_timing_failed_ = false;         // warned once
  RunDevice device_;                         // what ctx_ is (its ctx moved into ctx_)
  MemoryEstimate memory_estimate_;           // per rank, device scratch included (rank 0)
  // False once the kernel refused to reset the resident high-water mark (base/process_memory.h):
  // from then on peak_rss_bytes is the peak since the process started.
  bool resident_peak_resets_ = true;
  comm::ProcessGroups groups_;
  bool has_groups_ = false;
  // Device backends (NCCL) only: turns a stalled peer into an abort with a message. Declared
  // after groups_ so that it stops before the communicators it polls are destroyed.
  std::unique_ptr<comm::Watchdog> watchdog_;
  io::TempDir dry_run_data_dir_;  // a dry run's token cache (data_directory); outlives data_
  std::unique_ptr<RunData> data_;
  std::unique_ptr<TransformerLM> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<data::BatchScheduler> scheduler_;
  std::unique_ptr<Coordinator> coordinator_;
  int64_t updates_ = 0;                 // optimiser updates applied (skipped steps excluded)
  std::vector<Tensor> previous_probe_;  // per MoE layer, the probe batch's argmax experts (device)
  int64_t micro_batch_per_rank_ = 0;    // TrainConfig::micro_batch_per_rank of this world
  // The step's buffers, made once (a CUDA graph of the step reads the same memory every time):
  // the step buffer (StepBuffer, on the device); the batch's inputs and targets [grad_accum m,
  // S] i32 and the stop and save flags f64 [2], in staging memory (Context::staging).
  Tensor step_buffer_, batch_inputs_, batch_targets_, step_flags_;
  // The step's random keys in device memory (StepContext::device_step): [step, its first global
  // sequence], written from staging at the start of the device work, so that a replayed graph
  // draws the current step's dropout masks and SparseMixer samples.
  Tensor step_keys_, step_keys_staged_;
  DeviceStep device_step_;
  std::vector<int64_t> scheduler_batch_;  // the step's global batch (sequence ids)
  // train.cuda_graphs where it applies (step_graph.h); null otherwise.
  std::unique_ptr<StepGraph> step_graph_;
  std::string resumed_from_;
  std::unique_ptr<RunSession>
      session_;  // the run directory, resume choice and lineage (no dry run)
  std::map<std::string, std::string> fingerprints_;  // corpus_fingerprints, computed once
  int stop_local_ = 0;                               // the stop signal this rank saw
  int64_t skipped_streak_ = 0;        // consecutive steps skipped as non-finite, up to now
  std::string last_good_checkpoint_;  // saved (or resumed from) before the current streak
  bool stop_agreed_ = false;          // some rank asked to stop; every rank agrees
  // Checkpoints by time (train.checkpoint_minutes): rank 0's clock since the last save (or the
  // start) decides, and the step buffer's reduction tells every rank.
  std::chrono::steady_clock::time_point last_save_time_ = std::chrono::steady_clock::now();
  bool save_due_ = false;  // this step ends with a checkpoint by time
};

}  // namespace moe
