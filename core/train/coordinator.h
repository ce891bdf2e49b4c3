// The coordinator: rank 0's view of the job. Every rank calls these collectively; rank 0 does the
// work. It checks that every rank runs the same configuration, gathers each rank's serialized
// StepStats, aggregates them per layer (global expert loads are sums over ranks), flags anomalies
// (a non-finite loss, a collapsed layer), appends the aggregate to RUN_DIR/stats.pb and prints one
// progress line per logged step. It also appends one JSON line per logged step, evaluation and
// rollback marker to RUN_DIR/metrics.jsonl (types/step_stats_json.h), flushed at once, for
// tools that follow a run live; stats.pb stays the complete, checksummed record. With
// train.tensorboard it also writes the same records' scalars (types/step_stats_scalars.h) to a
// TensorBoard event file of its own in RUN_DIR (proto/event_file.h), at the same moments.
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/progress.h"
#include "comm/communicator.h"
#include "types/run_config.h"
#include "types/step_stats.h"

namespace moe {

class EventFileWriter;
class StatsFileWriter;

inline constexpr char kMetricsFile[] = "metrics.jsonl";

class Coordinator {
 public:
  // world nullable (one rank). stats_path empty: no file. progress: where rank 0 prints.
  Coordinator(const RunConfig& cfg, comm::Communicator* world, std::string stats_path,
              std::FILE* progress);
  ~Coordinator();

  // Collective: fails on every rank, naming the ranks whose configuration text differs from
  // rank 0's (a hash of the resolved config is exchanged).
  Status verify_same_config(const std::string& config_text) const;

  // Collective: gathers `local` from every rank; rank 0 aggregates, adds `flip_rates` (one per
  // MoE layer, or empty) and anomalies, writes and prints. Returns the aggregate on rank 0 and
  // `local` elsewhere.
  StatusOr<StepStatsInfo> report_step(const StepStatsInfo& local,
                                      const std::vector<double>& flip_rates, int64_t total_steps);

  // Rank 0: appends an evaluation record (step and perplexities) to stats.pb.
  void report_eval(const StepStatsInfo& eval);
  // Rank 0: the run starts (or resumes) with `steps_done` steps done. The event file gets a
  // SessionLog START at the next step, so that TensorBoard drops what earlier files hold from
  // there on (the steps this run repeats after a crash or a rollback).
  void report_start(int64_t steps_done);
  // Rank 0: appends a rollback marker (the run resumed from the checkpoint of `step` steps, and
  // the records after it belong to an abandoned branch; see proto/stats.proto).
  void report_rollback(int64_t step);
  // Rank 0, after resuming from the checkpoint of `step` steps without a rollback: when stats.pb
  // holds records of later steps (a run killed after its last checkpoint), appends an
  // `interrupted` marker so that readers of stats.pb and metrics.jsonl drop them, and says so.
  void report_resume(int64_t step);
  // Collective: whether stats.pb holds an evaluation at `step` over `eval_sequences` sequences
  // per split (0: whole splits) in its live records (rank 0 reads, every rank gets the answer).
  StatusOr<bool> has_evaluation(int64_t step, int64_t eval_sequences) const;
  // Rank 0: makes every record written so far durable (fsync).
  void flush();

  bool is_root() const { return world_ == nullptr || world_->rank() == 0; }
  // The world in layout order once the process groups exist (comm/process_groups.h; its rank 0
  // is the same process): statistics are then gathered and aggregated in layout order, the
  // default placement's.
  void set_world(comm::Communicator* world) { world_ = world; }
  // Rank 0: prints a line (newline added).
  void print(const std::string& line) const;

  // The run's ETA: time spent evaluating so far (kept out of the per-step rate), and the
  // estimated time of the evaluations still to come (added to the ETA and shown).
  void note_evaluation(double seconds) { eval_seconds_ += seconds; }
  void set_evaluation_eta(double seconds) { eval_eta_ = seconds; }
  // The training FLOPs per token (model_size.h) and the FLOP/s the job's devices reach together
  // (gemm_rate.h; 0: not measured): progress lines show the FLOP/s achieved, and the MFU (model
  // FLOPs utilisation) when the rate is known.
  void set_compute(double flops_per_token, double peak_flops) {
    flops_per_token_ = flops_per_token;
    peak_flops_ = peak_flops;
  }

 private:
  std::string progress_line(const StepStatsInfo& s, int64_t total_steps) const;
  // Records a collapsed layer (max_load over train.collapse_threshold) as an anomaly of every
  // step it stays so, and adds to `announce` only the step it collapses (with what to do) and
  // the step it recovers.
  void note_collapses(StepStatsInfo* agg, std::vector<std::string>* announce);
  // metrics.jsonl's line and the event file's scalars of one record.
  void write_metrics(const StepStatsInfo& record);
  void write_marker(int64_t step, bool interrupted);  // stats.pb and metrics.jsonl

  RunConfig cfg_;
  comm::Communicator* world_;
  std::unique_ptr<StatsFileWriter> writer_;
  std::FILE* progress_;
  // Rank 0, at the first record: metrics.jsonl and the event file in run_dir_ (empty: none).
  void open_live_files();

  std::string run_dir_;
  bool live_files_opened_ = false;
  std::FILE* metrics_ = nullptr;
  std::unique_ptr<EventFileWriter> events_;
  std::chrono::steady_clock::time_point start_;
  int64_t first_step_ = -1;
  bool rolled_back_ = false;              // report_rollback wrote a marker for this resume
  std::vector<int64_t> collapsed_since_;  // per block: the step its routing collapsed, or -1
  double eval_seconds_ = 0, eval_eta_ = 0;
  double flops_per_token_ = 0, peak_flops_ = 0;  // set_compute
};

}  // namespace moe
