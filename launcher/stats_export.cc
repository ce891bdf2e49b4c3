#include "launcher/stats_export.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <tuple>

#include "base/check.h"
#include "base/progress.h"
#include "launcher/env_params.h"
#include "proto/stats_convert.h"
#include "types/step_stats_json.h"

namespace moe {

std::vector<StepStatsInfo> latest_per_step(std::vector<StepStatsInfo> steps) {
  steps = live_records(std::move(steps));  // a rolled-back run: the live branch only
                                           // (is training, step, sequences evaluated) -> index: a
                                           // step's subset and whole-split
  // evaluations are two records.
  std::map<std::tuple<bool, int64_t, int64_t>, size_t> last;
  for (size_t i = 0; i < steps.size(); ++i) {
    last[{is_training_step(steps[i]), steps[i].step, steps[i].eval_sequences.value_or(-1)}] = i;
  }
  std::vector<size_t> keep;
  for (const auto& [key, index] : last) keep.push_back(index);
  std::sort(keep.begin(), keep.end(), [&](size_t a, size_t b) {
    return steps[a].step != steps[b].step ? steps[a].step < steps[b].step : a < b;
  });
  std::vector<StepStatsInfo> out;
  for (size_t i : keep) out.push_back(std::move(steps[i]));
  return out;
}

std::string step_line(const StepStatsInfo& s) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(4);
  if (!is_training_step(s)) {
    os << "eval step " << s.step;
    if (s.valid_ppl) os << " valid_ppl " << *s.valid_ppl;
    if (s.test_ppl) os << " test_ppl " << *s.test_ppl;
    if (s.attacked_valid_ppl) os << " attacked_valid_ppl " << *s.attacked_valid_ppl;
    if (s.attacked_test_ppl) os << " attacked_test_ppl " << *s.attacked_test_ppl;
    if (s.valid_word_ppl) os << " valid_word_ppl " << *s.valid_word_ppl;
    if (s.valid_bits_per_byte) os << " valid_bits_per_byte " << *s.valid_bits_per_byte;
    if (s.test_word_ppl) os << " test_word_ppl " << *s.test_word_ppl;
    if (s.test_bits_per_byte) os << " test_bits_per_byte " << *s.test_bits_per_byte;
    return os.str();
  }
  os << "step " << s.step << " loss " << s.loss << " ppl " << std::exp(s.loss) << " aux "
     << s.aux_loss << " gnorm " << s.grad_norm << " tok/s " << std::setprecision(0)
     << s.tokens_per_second << std::setprecision(3);
  for (const RouterStatsInfo& l : s.layers) {
    os << " | b" << l.block << " drop " << l.dropped_fraction << " maxload " << l.max_load << " H "
       << l.mean_entropy;
  }
  for (const std::string& a : s.anomalies) os << " | " << a;
  return os.str();
}

namespace {

using TrainSteps = std::vector<const StepStatsInfo*>;

// Writes the step count and the mean loss (and ppl) over train[from..].
void write_mean_loss(std::ostream& os, const TrainSteps& train, size_t from) {
  const StepStatsInfo& last = *train.back();
  double loss = 0;
  for (size_t i = from; i < train.size(); ++i) loss += train[i]->loss;
  loss /= static_cast<double>(train.size() - from);
  os << "steps recorded: " << train.size() << ", last step " << last.step
     << ", mean loss over the last " << train.size() - from << ": " << std::fixed
     << std::setprecision(4) << loss << " (ppl " << std::setprecision(2) << std::exp(loss) << ")\n";
}

// Writes the perplexities of the evaluation `e`. A subset's (eval_sequences > 0) measures per
// word and per byte are estimates at the whole split's tokens per word and per byte, and say so;
// its <unk> share and realised swap fraction are the subset's own.
void write_last_evaluation(std::ostream& os, const StepStatsInfo& e) {
  const bool subset = e.eval_sequences.value_or(0) > 0;
  os << std::setprecision(2) << "last evaluation (step " << e.step;
  if (subset) os << ", first " << *e.eval_sequences << " sequences of each split";
  os << "):";
  if (e.valid_ppl) os << " valid ppl " << *e.valid_ppl;
  if (e.test_ppl) os << ", test ppl " << *e.test_ppl;
  if (e.attacked_valid_ppl) os << ", attacked valid ppl " << *e.attacked_valid_ppl;
  if (e.attacked_test_ppl) os << ", attacked test ppl " << *e.attacked_test_ppl;
  if (e.valid_word_ppl) os << ", valid ppl per word " << *e.valid_word_ppl;
  if (e.valid_bits_per_byte) {
    os << std::setprecision(4) << ", valid bits per byte " << *e.valid_bits_per_byte
       << std::setprecision(2);
  }
  // Per-word measures compare across tokenizers only at equal <unk> shares.
  if (subset && (e.valid_word_ppl || e.valid_bits_per_byte)) {
    os << " (estimates at the whole split's tokens per word and per byte";
    if (e.valid_unknown_fraction) {
      os << "; " << format_percent(*e.valid_unknown_fraction) << " of those sequences <unk>";
    }
    os << ")";
  } else if ((e.valid_word_ppl || e.valid_bits_per_byte) && e.valid_unknown_fraction) {
    os << " (" << format_percent(*e.valid_unknown_fraction) << " of the valid text <unk>)";
  }
  // The attack's realised swap fraction (0.0250 for attack_rate 0.025), not rounded away.
  if (e.attack_rate) {
    os << std::setprecision(4) << " (realised swap fraction " << *e.attack_rate << ")";
  }
  os << "\n";
}

// Writes where the time of a step goes (the mean over the steps of train[from..] recorded with
// their phases; nothing when none was). "other" is each step's time less its phases, averaged.
// A record's phases are each the slowest rank's (aggregate_step_stats), and the slowest rank may
// differ from phase to phase, so they can add up to more than the step: such a step counts 0
// there (never a negative time), and a note says how many did and by how much.
void write_phase_times(std::ostream& os, const TrainSteps& train, size_t from) {
  PhaseSecondsArray phases{};
  double step_seconds = 0, other = 0, most_over = 0;
  int64_t timed = 0, over = 0;
  for (size_t i = from; i < train.size(); ++i) {
    if (!train[i]->phases) continue;
    double accounted = 0;
    for (int p = 0; p < kNumPhases; ++p) {
      const double seconds = (*train[i]->phases)[p];
      phases[p] += seconds;
      if (static_cast<Phase>(p) != Phase::kExchange) accounted += seconds;  // within backward
    }
    const double rest = train[i]->step_seconds - accounted;
    if (rest < 0) {
      ++over;
      most_over = std::max(most_over, -rest);
    }
    other += std::max(0.0, rest);
    step_seconds += train[i]->step_seconds;
    ++timed;
  }
  if (timed == 0) return;
  const auto ms = [&](Phase p) { return 1e3 * phases[static_cast<int>(p)] / timed; };
  os << std::setprecision(1) << "time per step (mean of the last " << timed
     << "): " << 1e3 * step_seconds / timed << " ms = data " << ms(Phase::kData) << " + forward "
     << ms(Phase::kForward) << " + backward " << ms(Phase::kBackward) << " (MoE exchange "
     << ms(Phase::kExchange) << " of them) + grad sync " << ms(Phase::kGradSync) << " + optimizer "
     << ms(Phase::kOptimizer) << " + other " << 1e3 * other / timed << " ms\n";
  if (over > 0) {
    os << "  (in " << over << " of these steps the phases, each the slowest rank's, add up to "
       << "more than the step, by up to " << 1e3 * most_over
       << " ms: the slowest rank differs between phases; \"other\" counts 0 for them)\n";
  }
}

// Writes the largest memory peaks of the steps of train[from..] recorded with them (each record's
// the largest rank's; nothing when none was).
void write_peak_memory(std::ostream& os, const TrainSteps& train, size_t from) {
  std::optional<int64_t> tensors, resident;
  for (size_t i = from; i < train.size(); ++i) {
    const StepStatsInfo& s = *train[i];
    if (s.peak_tensor_bytes) tensors = std::max(tensors.value_or(0), *s.peak_tensor_bytes);
    if (s.peak_rss_bytes) resident = std::max(resident.value_or(0), *s.peak_rss_bytes);
  }
  if (!tensors && !resident) return;
  const auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
  os << std::setprecision(3) << "peak memory per step (the largest of the last "
     << train.size() - from << ", the largest rank's):";
  if (tensors) os << " tensors " << gib(*tensors) << " GiB";
  if (tensors && resident) os << ",";
  if (resident) os << " resident " << gib(*resident) << " GiB (the host process's)";
  os << "\n";
}

// Writes the table of each layer's statistics, the mean over train[from..].
void write_layer_table(std::ostream& os, const TrainSteps& train, size_t from) {
  const StepStatsInfo& last = *train.back();
  os << std::left << std::setw(6) << "block" << std::right << std::setw(10) << "drop%"
     << std::setw(10) << "maxload" << std::setw(10) << "lb_std" << std::setw(8) << "dead"
     << std::setw(10) << "balance" << std::setw(10) << "z_loss" << std::setw(10) << "seq_bal"
     << std::setw(10) << "entropy" << std::setw(10) << "|u|" << std::setw(10) << "|p|"
     << std::setw(10) << "flip%" << std::setw(10) << "bias_sp" << std::setw(10) << "xch_saved"
     << "\n";
  constexpr int kColumns = 13;
  for (size_t l = 0; l < last.layers.size(); ++l) {
    double v[kColumns] = {0};
    for (size_t i = from; i < train.size(); ++i) {
      if (l >= train[i]->layers.size()) continue;
      const RouterStatsInfo& r = train[i]->layers[l];
      const double x[kColumns] = {100 * r.dropped_fraction, r.max_load,
                                  r.load_balance_std,       static_cast<double>(r.dead_experts),
                                  r.balance_loss,           r.z_loss,
                                  r.seq_balance_loss,       r.mean_entropy,
                                  r.mean_output_norm,       r.mean_state_norm,
                                  100 * r.probe_flip_rate,  score_bias_spread(r),
                                  r.dispatch_saved_fraction};
      for (int k = 0; k < kColumns; ++k) v[k] += x[k];
    }
    const double n = static_cast<double>(train.size() - from);
    os << std::left << std::setw(6) << last.layers[l].block << std::right << std::fixed
       << std::setprecision(3);
    for (int k = 0; k < kColumns; ++k) os << std::setw(k == 3 ? 8 : 10) << v[k] / n;
    os << "\n";
  }
}

}  // namespace

std::string summary_table(const std::vector<StepStatsInfo>& steps, int64_t window) {
  TrainSteps train;
  const StepStatsInfo* last_eval = nullptr;
  for (const StepStatsInfo& s : steps) {
    if (is_training_step(s)) {
      train.push_back(&s);
    } else {
      last_eval = &s;
    }
  }
  std::ostringstream os;
  if (train.empty()) {
    os << "no training steps recorded\n";
    return os.str();
  }
  const size_t from = train.size() > static_cast<size_t>(window) ? train.size() - window : 0;
  // One stream throughout: each part goes on with the formatting the one before it left.
  write_mean_loss(os, train, from);
  if (last_eval != nullptr) write_last_evaluation(os, *last_eval);
  write_phase_times(os, train, from);
  write_peak_memory(os, train, from);
  write_layer_table(os, train, from);
  for (const StepStatsInfo* s : train) {
    for (const std::string& a : s->anomalies) os << "anomaly: " << a << "\n";
  }
  return os.str();
}

Status write_csv(const std::vector<StepStatsInfo>& steps, const std::string& path) {
  std::ofstream out(path);
  if (!out) return not_found_error("cannot write ", path);
  out << "step,loss,aux_loss,learning_rate,grad_norm,tokens_per_second,skipped,block,moe_index,"
         "dropped_fraction,max_load,load_balance_std,dead_experts,balance_loss,z_loss,"
         "seq_balance_loss,mean_entropy,mean_output_norm,mean_state_norm,probe_flip_rate,"
         "score_bias_spread,dispatch_rows_sent,dispatch_rows_undeduplicated,dispatch_bytes_sent,"
         "dispatch_bytes_undeduplicated,dispatch_saved_fraction,expert_load,"
         "eval_sequences,valid_ppl,test_ppl,attacked_valid_ppl,attacked_test_ppl,attack_rate,"
         "valid_word_ppl,test_word_ppl,valid_bits_per_byte,test_bits_per_byte,"
         "valid_unknown_fraction,test_unknown_fraction,data_seconds,"
         "forward_seconds,backward_seconds,exchange_seconds,grad_sync_seconds,optimizer_seconds,"
         "eval_seconds,peak_tensor_bytes,peak_rss_bytes\n";
  out << std::setprecision(9);
  const auto opt = [&](const auto& v) {
    out << ',';
    if (v) out << *v;
  };
  for (const StepStatsInfo& s : steps) {
    if (s.rollback_to) continue;
    if (!is_training_step(s)) {  // an evaluation: its own row, the training columns empty
      out << s.step << std::string(27, ',') << s.eval_sequences.value_or(0);
      for (const auto* v :
           {&s.valid_ppl, &s.test_ppl, &s.attacked_valid_ppl, &s.attacked_test_ppl, &s.attack_rate,
            &s.valid_word_ppl, &s.test_word_ppl, &s.valid_bits_per_byte, &s.test_bits_per_byte,
            &s.valid_unknown_fraction, &s.test_unknown_fraction}) {
        opt(*v);
      }
      out << std::string(kNumPhases, ',');
      opt(s.eval_seconds);
      out << ",,\n";
      continue;
    }
    for (const RouterStatsInfo& l : s.layers) {
      out << s.step << ',' << s.loss << ',' << s.aux_loss << ',' << s.learning_rate << ','
          << s.grad_norm << ',' << s.tokens_per_second << ',' << (s.skipped ? 1 : 0) << ','
          << l.block << ',' << l.moe_index << ',' << l.dropped_fraction << ',' << l.max_load << ','
          << l.load_balance_std << ',' << l.dead_experts << ',' << l.balance_loss << ',' << l.z_loss
          << ',' << l.seq_balance_loss << ',' << l.mean_entropy << ',' << l.mean_output_norm << ','
          << l.mean_state_norm << ',' << l.probe_flip_rate << ',' << score_bias_spread(l) << ','
          << l.dispatch_rows_sent << ',' << l.dispatch_rows_undeduplicated << ','
          << l.dispatch_rows_sent * l.dispatch_row_bytes << ','
          << l.dispatch_rows_undeduplicated * l.dispatch_row_bytes << ','
          << l.dispatch_saved_fraction << ",\"";
      for (size_t e = 0; e < l.expert_load.size(); ++e) out << (e ? " " : "") << l.expert_load[e];
      out << "\"" << std::string(12, ',');
      for (int p = 0; p < kNumPhases; ++p) {
        out << ',';
        if (s.phases) out << (*s.phases)[p];
      }
      out << ',';  // eval_seconds
      opt(s.peak_tensor_bytes);
      opt(s.peak_rss_bytes);
      out << "\n";
    }
  }
  if (!out) return internal_error("writing ", path, " failed");
  return Status::OK();
}

Status write_json_lines(const std::vector<StepStatsInfo>& steps, const std::string& path) {
  std::ofstream out(path);
  if (!out) return not_found_error("cannot write ", path);
  for (const StepStatsInfo& s : steps) out << step_stats_json(s) << "\n";
  if (!out) return internal_error("writing ", path, " failed");
  return Status::OK();
}

Status plot(const std::string& json_path, const std::string& png_path) {
  const std::string script = env::plot_script().empty() ? MOE_PLOT_SCRIPT : env::plot_script();
  // Debian's python3 has matplotlib (python3-matplotlib); prefer it over other installations.
  const std::string python =
      std::ifstream("/usr/bin/python3").good() ? "/usr/bin/python3" : "python3";
  const std::string cmd = python + " '" + script + "' '" + json_path + "' '" + png_path + "'";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    return internal_error("plotting failed (", cmd, " exited with ", rc,
                          "); it needs python3 with matplotlib (Debian: python3-matplotlib)");
  }
  return Status::OK();
}

}  // namespace moe
