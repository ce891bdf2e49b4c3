#include "core/train/coordinator.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include "base/hash.h"
#include "base/logging.h"
#include "core/train/model_size.h"
#include "proto/event_file.h"
#include "proto/stats_convert.h"
#include "types/step_stats_json.h"
#include "types/step_stats_scalars.h"

namespace moe {

Coordinator::Coordinator(const RunConfig& cfg, comm::Communicator* world, std::string stats_path,
                         std::FILE* progress)
    : cfg_(cfg), world_(world), progress_(progress), start_(std::chrono::steady_clock::now()) {
  if (is_root() && !stats_path.empty()) {
    writer_ = std::make_unique<StatsFileWriter>();
    std::string note;
    Status s = writer_->open(stats_path, &note);
    if (!s.ok()) {
      log_error("statistics will not be written: ", s.to_string());
      writer_.reset();
    } else if (!note.empty()) {
      print("momoe: " + note);
    }
    // Live metrics (one JSON line per logged step and per evaluation, appended as they happen)
    // and the TensorBoard event file: opened at their first record, so that a start refused
    // before any record leaves an earlier run's directory as it was.
    run_dir_ = std::filesystem::path(stats_path).parent_path().string();
  }
}

void Coordinator::open_live_files() {
  if (run_dir_.empty() || live_files_opened_) return;
  live_files_opened_ = true;
  const std::string metrics = (std::filesystem::path(run_dir_) / kMetricsFile).string();
  metrics_ = std::fopen(metrics.c_str(), "a");
  if (metrics_ == nullptr) log_error("cannot append to ", metrics, ": ", std::strerror(errno));
  if (cfg_.train.tensorboard) {
    StatusOr<std::unique_ptr<EventFileWriter>> events = EventFileWriter::create(run_dir_);
    if (events.ok()) {
      events_ = std::move(*events);
    } else {
      log_error("TensorBoard events will not be written: ", events.status().to_string());
    }
  }
}

Coordinator::~Coordinator() {
  if (metrics_ != nullptr) std::fclose(metrics_);
}

void Coordinator::write_metrics(const StepStatsInfo& record) {
  open_live_files();
  if (metrics_ != nullptr) {
    std::fprintf(metrics_, "%s\n", step_stats_json(record).c_str());
    std::fflush(metrics_);
  }
  const std::vector<NamedScalar> scalars = step_stats_scalars(record);
  if (events_ != nullptr && !scalars.empty()) {
    Status s = events_->write_scalars(scalar_step(record), scalars);
    if (!s.ok()) log_error("TensorBoard events: ", s.to_string());
  }
}

Status Coordinator::verify_same_config(const std::string& config_text) const {
  if (world_ == nullptr || world_->world_size() == 1) return Status::OK();
  const std::string mine = std::to_string(fnv1a64(config_text));
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> all, world_->gather_bytes(mine, 0));
  std::string verdict;
  if (world_->rank() == 0) {
    for (size_t r = 1; r < all.size(); ++r) {
      if (all[r] != all[0]) verdict += (verdict.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  MOE_ASSIGN_OR_RETURN(verdict, world_->broadcast_bytes(verdict, 0));
  if (!verdict.empty()) {
    return invalid_argument_error("rank(s) ", verdict,
                                  " run a different configuration than rank 0 ",
                                  "(the resolved configs' hashes differ; check --config and --set)")
        .as_job_wide();  // rank 0's verdict, broadcast
  }
  return Status::OK();
}

StatusOr<StepStatsInfo> Coordinator::report_step(const StepStatsInfo& local,
                                                 const std::vector<double>& flip_rates,
                                                 int64_t total_steps) {
  std::vector<StepStatsInfo> per_rank;
  if (world_ != nullptr && world_->world_size() > 1) {
    MOE_ASSIGN_OR_RETURN(std::vector<std::string> bytes,
                         world_->gather_bytes(serialize_step_stats(local), 0));
    if (!is_root()) return local;
    for (size_t r = 0; r < bytes.size(); ++r) {
      MOE_ASSIGN_OR_RETURN(StepStatsInfo s, parse_step_stats(bytes[r]));
      per_rank.push_back(std::move(s));
    }
  } else {
    per_rank.push_back(local);
  }
  StepStatsInfo agg = aggregate_step_stats(per_rank);
  for (size_t l = 0; l < agg.layers.size() && l < flip_rates.size(); ++l) {
    agg.layers[l].probe_flip_rate = flip_rates[l];
  }
  if (!std::isfinite(agg.loss)) {
    agg.anomalies.push_back(
        str_cat("step ", agg.step, ": non-finite loss; the update was skipped"));
  }
  std::vector<std::string> announce = agg.anomalies;  // printed now (non-finite: every time)
  note_collapses(&agg, &announce);
  if (writer_ != nullptr) {
    Status s = writer_->append(agg);
    if (!s.ok()) log_error("stats.pb: ", s.to_string());
  }
  if (first_step_ < 0) {
    first_step_ = agg.step - 1;  // the steps done before this process's first
    start_ = std::chrono::steady_clock::now() -
             std::chrono::microseconds(static_cast<int64_t>(agg.step_seconds * 1e6));
  }
  if (agg.step % cfg_.train.log_every == 0 || agg.step == total_steps || !announce.empty()) {
    print(progress_line(agg, total_steps));
    write_metrics(agg);
    for (const std::string& a : announce) log_warning(a);
  }
  return agg;
}

void Coordinator::note_collapses(StepStatsInfo* agg, std::vector<std::string>* announce) {
  const double threshold = cfg_.train.collapse_threshold;
  for (const RouterStatsInfo& l : agg->layers) {
    const size_t b = static_cast<size_t>(l.block);
    if (collapsed_since_.size() <= b) collapsed_since_.resize(b + 1, -1);
    int64_t& since = collapsed_since_[b];
    if (l.max_load <= threshold) {
      if (since >= 0) {
        announce->push_back(str_cat("step ", agg->step, ": block ", l.block,
                                    " routing recovered: the busiest expert gets ", l.max_load,
                                    "x the mean load (collapsed since step ", since, ")"));
      }
      since = -1;
      continue;
    }
    // Every collapsed step is an anomaly of its record; the console hears of the first.
    const std::string what =
        str_cat("step ", agg->step, ": block ", l.block, " routing collapsed: the busiest expert ",
                "gets ", l.max_load, "x the mean load (threshold ", threshold, ")");
    agg->anomalies.push_back(what);
    if (since >= 0) continue;
    since = agg->step;
    std::string more =
        "; the steps it stays so are recorded in stats.pb, not repeated here until it recovers";
    if (b < cfg_.model.blocks.size() && cfg_.model.blocks[b].moe) {
      const MoeLayerConfig& m = cfg_.model.blocks[b].moe_cfg;
      const double most = static_cast<double>(m.num_experts) / static_cast<double>(m.top_k);
      more +=
          str_cat(". With top-", m.top_k, " of ", m.num_experts, " experts the load is at most ",
                  most, "x the mean; if such loads are expected (early training, a small ",
                  "batch), raise train.collapse_threshold");
    }
    announce->push_back(what + more);
  }
}

std::string Coordinator::progress_line(const StepStatsInfo& s, int64_t total_steps) const {
  // Training time so far (evaluations taken out), extrapolated to the remaining steps, plus the
  // trainer's estimate of the evaluations still to come (the final one included).
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() -
      eval_seconds_;
  const int64_t done = s.step - first_step_;
  const double train_eta = done > 0 ? std::max(0.0, elapsed) / static_cast<double>(done) *
                                          static_cast<double>(total_steps - s.step)
                                    : 0;
  const double eta = train_eta + eval_eta_;
  // bal: the Switch balance loss E sum_e f_e P_e (mean over layers). It reads about 1 whenever
  // the router's mean probabilities P are near uniform, however unevenly the tokens are
  // assigned (with P_e = 1/E it is sum_e f_e = 1), so the progress line also shows the load:
  // the busiest expert's assignments over the mean, in the worst layer.
  double balance = 0, dropped = 0, max_load = 0;
  for (const RouterStatsInfo& l : s.layers) {
    balance += l.balance_loss;
    dropped += l.dropped_fraction;
    max_load = std::max(max_load, l.max_load);
  }
  if (!s.layers.empty()) {
    balance /= static_cast<double>(s.layers.size());
    dropped /= static_cast<double>(s.layers.size());
  }
  std::ostringstream os;
  os << "step " << s.step << "/" << total_steps << std::fixed << std::setprecision(4);
  // A skipped step's loss is not a number: never printed as a perplexity.
  if (std::isfinite(s.loss)) {
    os << " | loss " << s.loss << std::setprecision(2) << " | ppl " << std::exp(s.loss);
  } else {
    os << " | loss non-finite | ppl -";
  }
  os << std::scientific << std::setprecision(2) << " | lr " << s.learning_rate << std::fixed
     << std::setprecision(3) << " | bal " << balance << std::setprecision(2) << " | load max "
     << max_load << std::setprecision(3) << " | aux " << s.aux_loss << std::setprecision(2)
     << " | drop " << 100 * dropped << "% | gnorm " << s.grad_norm << " | " << std::setprecision(0)
     << s.tokens_per_second << " tok/s";
  // The model FLOPs the step achieved (tokens/s x training FLOPs per token), and their share of
  // what the devices reach on a large GEMM.
  const double flops = s.tokens_per_second * flops_per_token_;
  if (flops_per_token_ > 0) os << " | " << si_count(flops, "FLOP/s");
  if (peak_flops_ > 0) os << std::setprecision(1) << " | MFU " << 100 * flops / peak_flops_ << "%";
  os << " | ETA " << format_duration(eta);
  if (eval_eta_ >= 1) os << " (evaluation " << format_duration(eval_eta_) << ")";
  if (s.skipped) os << " | SKIPPED";
  return os.str();
}

void Coordinator::report_eval(const StepStatsInfo& eval) {
  if (!is_root()) return;
  write_metrics(eval);
  if (writer_ == nullptr) return;
  Status s = writer_->append(eval);
  if (!s.ok()) log_error("stats.pb: ", s.to_string());
}

void Coordinator::report_start(int64_t steps_done) {
  if (!is_root()) return;
  open_live_files();
  if (events_ == nullptr) return;
  Status s = events_->write_start(steps_done + 1);  // the next training record's step
  if (!s.ok()) log_error("TensorBoard events: ", s.to_string());
}

void Coordinator::report_rollback(int64_t step) {
  if (!is_root() || writer_ == nullptr) return;
  rolled_back_ = true;
  write_marker(step, false);
}

void Coordinator::report_resume(int64_t step) {
  if (!is_root() || writer_ == nullptr || rolled_back_ || writer_->last_step() <= step) return;
  print(str_cat("momoe: the interrupted run recorded steps up to ", writer_->last_step(),
                " after this checkpoint; stats.pb and metrics.jsonl mark them superseded "
                "(an `interrupted` marker: readers drop them), and steps ",
                step + 1, " on are trained again"));
  write_marker(step, true);
}

void Coordinator::write_marker(int64_t step, bool interrupted) {
  StepStatsInfo marker;
  marker.step = step;
  marker.rank = -1;
  marker.rollback_to = step;
  marker.interrupted = interrupted;
  write_metrics(marker);
  Status s = writer_->append(marker);
  if (!s.ok()) log_error("stats.pb: ", s.to_string());
}

StatusOr<bool> Coordinator::has_evaluation(int64_t step, int64_t eval_sequences) const {
  bool held = false;
  if (is_root()) held = writer_ != nullptr && writer_->has_evaluation(step, eval_sequences);
  if (world_ == nullptr || world_->world_size() == 1) return held;
  MOE_ASSIGN_OR_RETURN(std::string answer, world_->broadcast_bytes(held ? "1" : "0", 0));
  return answer == "1";
}

void Coordinator::flush() {
  if (writer_ == nullptr) return;
  Status s = writer_->sync();
  if (!s.ok()) log_error("stats.pb: ", s.to_string());
}

void Coordinator::print(const std::string& line) const {
  if (!is_root() || progress_ == nullptr) return;
  std::fprintf(progress_, "%s\n", line.c_str());
  std::fflush(progress_);
}

}  // namespace moe
