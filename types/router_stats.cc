#include "types/router_stats.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace moe {

void RouterStatsInfo::merge(const RouterStatsInfo& o) {
  MOE_CHECK(expert_load.size() == o.expert_load.size(), "merging stats of different layers");
  tokens += o.tokens;
  slots += o.slots;
  for (size_t e = 0; e < expert_load.size(); ++e) expert_load[e] += o.expert_load[e];
  dropped_slots += o.dropped_slots;
  fully_dropped_tokens += o.fully_dropped_tokens;
  balance_loss_sum += o.balance_loss_sum;
  z_loss_sum += o.z_loss_sum;
  seq_balance_loss_sum += o.seq_balance_loss_sum;
  entropy_sum += o.entropy_sum;
  output_norm_sum += o.output_norm_sum;
  state_norm_sum += o.state_norm_sum;
  top1_gate_sum += o.top1_gate_sum;
  if (cluster_size.size() == o.cluster_size.size()) {
    for (size_t e = 0; e < cluster_size.size(); ++e) {
      cluster_size[e] += o.cluster_size[e];
      cluster_dispersion[e] += o.cluster_dispersion[e];
    }
  }
  tiny_clusters += o.tiny_clusters;
  metric_min = std::min(metric_min, o.metric_min);
  metric_max = std::max(metric_max, o.metric_max);
  metric_mean = (metric_mean * ranks + o.metric_mean * o.ranks) / (ranks + o.ranks);
  single_expert_tokens += o.single_expert_tokens;
  non_argmax_tokens += o.non_argmax_tokens;
  halved_tokens += o.halved_tokens;
  unmasked_sum += o.unmasked_sum;
  dispatch_rows_sent += o.dispatch_rows_sent;
  dispatch_rows_undeduplicated += o.dispatch_rows_undeduplicated;
  dispatch_row_bytes = std::max(dispatch_row_bytes, o.dispatch_row_bytes);  // one value, or 0
  if (score_bias.empty()) score_bias = o.score_bias;
  ranks += o.ranks;
}

double score_bias_spread(const RouterStatsInfo& l) {
  if (l.score_bias.empty()) return 0.0;
  const auto [lo, hi] = std::minmax_element(l.score_bias.begin(), l.score_bias.end());
  return *hi - *lo;
}

void RouterStatsInfo::finalize() {
  const double t = tokens > 0 ? static_cast<double>(tokens) : 1.0;
  dropped_fraction = slots > 0 ? static_cast<double>(dropped_slots) / slots : 0.0;
  const double num_experts = static_cast<double>(expert_load.size());
  dead_experts = 0;
  double max_count = 0, mean_f = 0;
  for (int64_t c : expert_load) {
    max_count = std::max(max_count, static_cast<double>(c));
    dead_experts += c == 0;
    mean_f += slots > 0 ? 100.0 * c / slots : 0.0;
  }
  max_load = (slots > 0 && num_experts > 0) ? max_count / (slots / num_experts) : 0.0;
  mean_f /= num_experts > 0 ? num_experts : 1.0;
  double var = 0;
  for (int64_t c : expert_load) {
    const double f = slots > 0 ? 100.0 * c / slots : 0.0;
    var += (f - mean_f) * (f - mean_f);
  }
  load_balance_std = num_experts > 0 ? std::sqrt(var / num_experts) : 0.0;  // population std
  balance_loss = balance_loss_sum / t;
  z_loss = z_loss_sum / t;
  seq_balance_loss = seq_balance_loss_sum / t;
  mean_entropy = entropy_sum / t;
  mean_output_norm = output_norm_sum / t;
  mean_state_norm = state_norm_sum / t;
  dispatch_saved_fraction = dispatch_rows_undeduplicated > 0
                                ? 1.0 - static_cast<double>(dispatch_rows_sent) /
                                            static_cast<double>(dispatch_rows_undeduplicated)
                                : 0.0;
  mean_cluster_dispersion.assign(cluster_size.size(), 0.0);
  for (size_t e = 0; e < cluster_size.size(); ++e) {
    if (cluster_size[e] > 0) mean_cluster_dispersion[e] = cluster_dispersion[e] / cluster_size[e];
  }
}

void RouterStatsLayout::read(const double* b, RouterStatsInfo* info) const {
  auto count = [](double v) { return static_cast<int64_t>(std::llround(v)); };
  info->tokens = count(b[kTokens]);
  info->slots = count(b[kSlots]);
  info->dropped_slots = count(b[kDroppedSlots]);
  info->fully_dropped_tokens = count(b[kFullyDropped]);
  info->balance_loss_sum = b[kBalanceLossSum];
  info->z_loss_sum = b[kZLossSum];
  info->seq_balance_loss_sum = b[kSeqBalanceLossSum];
  info->entropy_sum = b[kEntropySum];
  info->output_norm_sum = b[kOutputNormSum];
  info->state_norm_sum = b[kStateNormSum];
  info->top1_gate_sum = b[kTop1GateSum];
  info->unmasked_sum = b[kUnmaskedSum];
  info->single_expert_tokens = count(b[kSingleExpert]);
  info->non_argmax_tokens = count(b[kNonArgmax]);
  info->halved_tokens = count(b[kHalved]);
  info->dispatch_rows_undeduplicated = count(b[kDispatchRowsUndeduplicated]);
  info->dispatch_rows_sent = count(b[kDispatchRowsSent]);
  info->dispatch_row_bytes = count(b[kDispatchRowBytes]);
  info->expert_load.resize(experts_);
  for (int64_t e = 0; e < experts_; ++e) info->expert_load[e] = count(b[expert_load() + e]);
  const double* ac_block = b + ac();
  const double* fixed = ac_block + 2 * experts_;
  info->cluster_size.clear();
  info->cluster_dispersion.clear();
  if (fixed[4] > 0) {  // an AC layer: the ac_stats kernel ran
    info->cluster_size.resize(experts_);
    info->cluster_dispersion.resize(experts_);
    for (int64_t e = 0; e < experts_; ++e) {
      info->cluster_size[e] = count(ac_block[e]);
      info->cluster_dispersion[e] = ac_block[experts_ + e];
    }
    info->tiny_clusters = count(fixed[0]);
    info->metric_min = fixed[1];
    info->metric_max = fixed[2];
    info->metric_mean = fixed[3];
  }
  info->score_bias.clear();
  if (b[score_bias_set()] > 0)
    info->score_bias.assign(b + score_bias(), b + score_bias() + experts_);
}

}  // namespace moe
