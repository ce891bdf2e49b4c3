#include "types/step_stats_scalars.h"

#include <cmath>

#include "types/step_stats_json.h"

namespace moe {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void add_layer(const RouterStatsInfo& l, std::vector<NamedScalar>* out) {
  const std::string b = "block" + std::to_string(l.block) + "/";
  out->push_back({b + "balance_loss", l.balance_loss});
  out->push_back({b + "z_loss", l.z_loss});
  out->push_back({b + "seq_balance_loss", l.seq_balance_loss});
  out->push_back({b + "drop_rate", l.dropped_fraction});
  out->push_back({b + "max_load", l.max_load});
  out->push_back({b + "entropy", l.mean_entropy});
  out->push_back({b + "probe_flip_rate", l.probe_flip_rate});
  int64_t assignments = 0;
  for (const int64_t n : l.expert_load) assignments += n;
  for (size_t e = 0; e < l.expert_load.size(); ++e) {
    const double share =
        assignments > 0 ? static_cast<double>(l.expert_load[e]) / static_cast<double>(assignments)
                        : 0.0;
    out->push_back({b + "expert_load/" + std::to_string(e), share});
  }
  if (!l.score_bias.empty()) {
    out->push_back({b + "score_bias_spread", score_bias_spread(l)});
    for (size_t e = 0; e < l.score_bias.size(); ++e) {
      out->push_back({b + "score_bias/" + std::to_string(e), l.score_bias[e]});
    }
  }
}

void add_training(const StepStatsInfo& s, std::vector<NamedScalar>* out) {
  out->push_back({"train/loss", s.loss});
  out->push_back({"train/perplexity", std::exp(s.loss)});
  out->push_back({"train/aux_loss", s.aux_loss});
  out->push_back({"train/learning_rate", s.learning_rate});
  out->push_back({"train/grad_norm", s.grad_norm});
  out->push_back({"train/tokens_per_second", s.tokens_per_second});
  out->push_back({"train/step_seconds", s.step_seconds});
  out->push_back({"train/skipped", s.skipped ? 1.0 : 0.0});
  if (s.phases) {
    for (int p = 0; p < kNumPhases; ++p) {
      out->push_back({std::string("time/") + phase_name(static_cast<Phase>(p)), (*s.phases)[p]});
    }
  }
  if (s.peak_tensor_bytes) {
    out->push_back({"memory/peak_tensor_gib", static_cast<double>(*s.peak_tensor_bytes) / kGiB});
  }
  if (s.peak_rss_bytes) {
    out->push_back({"memory/peak_rss_gib", static_cast<double>(*s.peak_rss_bytes) / kGiB});
  }
  for (const RouterStatsInfo& l : s.layers) add_layer(l, out);
}

void add_evaluation(const StepStatsInfo& s, std::vector<NamedScalar>* out) {
  const std::string prefix = s.eval_sequences.value_or(0) > 0 ? "eval_subset/" : "eval/";
  for (const auto& [name, v] : evaluation_measures(s)) {
    if (v) out->push_back({prefix + name, *v});
  }
  if (s.eval_seconds) out->push_back({prefix + "seconds", *s.eval_seconds});
}

}  // namespace

int64_t scalar_step(const StepStatsInfo& s) { return s.step; }

std::vector<NamedScalar> step_stats_scalars(const StepStatsInfo& s) {
  std::vector<NamedScalar> out;
  if (s.rollback_to) return out;
  if (is_training_step(s)) {
    add_training(s, &out);
  } else {
    add_evaluation(s, &out);
  }
  return out;
}

}  // namespace moe
