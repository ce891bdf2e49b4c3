// Plain router statistics of one MoE layer for one step (the struct behind stats.proto's
// RouterStats). Counters are sums over tokens so that ranks aggregate by merge(); derived means
// are computed by finalize() after aggregation, never averaged across ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moe {

struct RouterStatsInfo {
  int32_t block = 0;
  int32_t moe_index = 0;
  int64_t tokens = 0;
  int64_t slots = 0;
  std::vector<int64_t> expert_load;  // [E]
  int64_t dropped_slots = 0;
  int64_t fully_dropped_tokens = 0;
  double balance_loss_sum = 0;  // T * (E sum_e f_e P_e), unweighted
  double z_loss_sum = 0;        // sum_t logsumexp_t^2
  double entropy_sum = 0;
  double output_norm_sum = 0;
  double state_norm_sum = 0;
  double top1_gate_sum = 0;
  // AC router.
  std::vector<int64_t> cluster_size;       // [E] (empty when not an AC layer)
  std::vector<double> cluster_dispersion;  // [E] sum of N_k * mean_q MAD_kq over ranks
  int64_t tiny_clusters = 0;
  double metric_min = 0, metric_max = 0, metric_mean = 0;
  // SparseMixer.
  int64_t single_expert_tokens = 0;
  int64_t non_argmax_tokens = 0;
  int64_t halved_tokens = 0;
  double unmasked_sum = 0;

  // Derived (finalize()).
  double dropped_fraction = 0;
  double max_load = 0;
  double load_balance_std = 0;
  int64_t dead_experts = 0;
  double balance_loss = 0;
  double z_loss = 0;
  double mean_entropy = 0;
  double mean_output_norm = 0;
  double mean_state_norm = 0;
  std::vector<double> mean_cluster_dispersion;  // [E] cluster_dispersion / cluster_size
  double probe_flip_rate = 0;
  int32_t ranks = 1;

  // Adds another rank's counters for the same layer (sizes must match).
  void merge(const RouterStatsInfo& other);
  // Computes the derived fields from the sums.
  void finalize();
};

}  // namespace moe
