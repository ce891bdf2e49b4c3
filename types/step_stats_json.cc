#include "types/step_stats_json.h"

#include <nlohmann/json.hpp>

namespace moe {
namespace {

nlohmann::json layer_json(const RouterStatsInfo& l) {
  nlohmann::json j;
  j["block"] = l.block;
  j["moe_index"] = l.moe_index;
  j["tokens"] = l.tokens;
  j["expert_load"] = l.expert_load;
  j["dropped_fraction"] = l.dropped_fraction;
  j["max_load"] = l.max_load;
  j["load_balance_std"] = l.load_balance_std;
  j["dead_experts"] = l.dead_experts;
  j["balance_loss"] = l.balance_loss;
  j["z_loss"] = l.z_loss;
  j["seq_balance_loss"] = l.seq_balance_loss;
  j["mean_entropy"] = l.mean_entropy;
  j["mean_output_norm"] = l.mean_output_norm;
  j["mean_state_norm"] = l.mean_state_norm;
  j["probe_flip_rate"] = l.probe_flip_rate;
  if (!l.score_bias.empty()) {
    j["score_bias"] = l.score_bias;
    j["score_bias_spread"] = score_bias_spread(l);
  }
  if (l.dispatch_row_bytes > 0) {  // a deduplicating dispatch counted its exchange
    j["dispatch_rows_sent"] = l.dispatch_rows_sent;
    j["dispatch_rows_undeduplicated"] = l.dispatch_rows_undeduplicated;
    j["dispatch_bytes_sent"] = l.dispatch_rows_sent * l.dispatch_row_bytes;
    j["dispatch_bytes_undeduplicated"] = l.dispatch_rows_undeduplicated * l.dispatch_row_bytes;
    j["dispatch_saved_fraction"] = l.dispatch_saved_fraction;
  }
  if (!l.cluster_size.empty()) {
    j["cluster_size"] = l.cluster_size;
    j["mean_cluster_dispersion"] = l.mean_cluster_dispersion;
    j["tiny_clusters"] = l.tiny_clusters;
    j["metric_min"] = l.metric_min;
    j["metric_max"] = l.metric_max;
  }
  if (l.unmasked_sum > 0) {
    j["single_expert_tokens"] = l.single_expert_tokens;
    j["non_argmax_tokens"] = l.non_argmax_tokens;
    j["halved_tokens"] = l.halved_tokens;
    j["mean_unmasked"] = l.tokens > 0 ? l.unmasked_sum / static_cast<double>(l.tokens) : 0.0;
  }
  return j;
}

}  // namespace

std::string step_stats_json(const StepStatsInfo& s) {
  nlohmann::json j;
  j["step"] = s.step;
  if (s.rollback_to) {
    j["rollback_to"] = *s.rollback_to;
    if (s.interrupted) j["interrupted"] = true;
    return j.dump();
  }
  if (is_training_step(s)) {
    j["loss"] = s.loss;
    j["aux_loss"] = s.aux_loss;
    j["learning_rate"] = s.learning_rate;
    j["grad_norm"] = s.grad_norm;
    j["tokens"] = s.tokens;
    j["step_seconds"] = s.step_seconds;
    j["tokens_per_second"] = s.tokens_per_second;
    j["skipped"] = s.skipped;
    if (s.phases) {
      nlohmann::json phases;
      for (int p = 0; p < kNumPhases; ++p)
        phases[phase_name(static_cast<Phase>(p))] = (*s.phases)[p];
      j["phase_seconds"] = phases;
    }
    if (s.peak_tensor_bytes) j["peak_tensor_bytes"] = *s.peak_tensor_bytes;
    if (s.peak_rss_bytes) j["peak_rss_bytes"] = *s.peak_rss_bytes;
    j["layers"] = nlohmann::json::array();
    for (const RouterStatsInfo& l : s.layers) j["layers"].push_back(layer_json(l));
    if (!s.anomalies.empty()) j["anomalies"] = s.anomalies;
  } else {
    j["eval_sequences"] = s.eval_sequences.value_or(0);
    if (s.eval_seconds) j["eval_seconds"] = *s.eval_seconds;
  }
  for (const auto& [key, v] : evaluation_measures(s)) {
    if (v) j[key] = *v;
  }
  // NaN and infinity are not JSON: nlohmann writes null for them.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace moe
