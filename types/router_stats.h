// Plain router statistics of one MoE layer for one step (the struct behind stats.proto's
// RouterStats). Counters are sums over tokens so that ranks aggregate by merge(); derived means
// are computed by finalize() after aggregation, never averaged across ranks.
//
// On the device a layer accumulates its counters into a block of f64 slots of the step's
// statistics buffer (RouterStatsLayout); the trainer reads the buffer back once per step and
// RouterStatsLayout::read() fills this struct.
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
  double balance_loss_sum = 0;      // T * (E sum_e f_e P_e), unweighted
  double z_loss_sum = 0;            // sum_t logsumexp_t^2
  double seq_balance_loss_sum = 0;  // T * (DeepSeek-V3's sequence-wise balance loss), unweighted
  double entropy_sum = 0;
  double output_norm_sum = 0;
  double state_norm_sum = 0;
  double top1_gate_sum = 0;
  // AC router.
  std::vector<int64_t> cluster_size;       // [E] (empty when not an AC layer)
  std::vector<double> cluster_dispersion;  // [E] sum of N_k * mean_q MAD_kq over ranks
  int64_t tiny_clusters = 0;
  double metric_min = 0, metric_max = 0, metric_mean = 0;
  // Loss-free balancing: the per-expert selection bias this step routed with ([E], empty
  // without loss-free balancing; the same on every rank, so merging keeps one copy).
  std::vector<double> score_bias;
  // SparseMixer.
  int64_t single_expert_tokens = 0;
  int64_t non_argmax_tokens = 0;
  int64_t halved_tokens = 0;
  double unmasked_sum = 0;
  // The forward dispatch's exchange, counted by the deduplicating dispatch (max_ep_ranks > 0 at
  // more than one EP rank; all three stay 0 otherwise). Rows of d_model activations sent to the
  // peer EP ranks (my own rank's never leave it), summed over ranks and micro-batches.
  int64_t dispatch_rows_sent = 0;            // unique (token, peer rank) rows actually sent
  int64_t dispatch_rows_undeduplicated = 0;  // kept peer assignments: what one row each would send
  // Bytes per row: d_model x the activation dtype's size (2 for bf16, 4 for f32, 8 for f64); the
  // same on every rank. Bytes sent = rows x this.
  int64_t dispatch_row_bytes = 0;

  // Derived (finalize()).
  double dropped_fraction = 0;
  double max_load = 0;
  double load_balance_std = 0;
  int64_t dead_experts = 0;
  double balance_loss = 0;
  double z_loss = 0;
  double seq_balance_loss = 0;
  double mean_entropy = 0;
  double mean_output_norm = 0;
  double mean_state_norm = 0;
  std::vector<double> mean_cluster_dispersion;  // [E] cluster_dispersion / cluster_size
  double probe_flip_rate = 0;
  // 1 - dispatch_rows_sent / dispatch_rows_undeduplicated: the share of the dispatch's rows (and
  // bytes) to peers that deduplication saved (0 when nothing was sent to peers).
  double dispatch_saved_fraction = 0;
  int32_t ranks = 1;

  // Adds another rank's counters for the same layer (sizes must match).
  void merge(const RouterStatsInfo& other);
  // Computes the derived fields from the sums.
  void finalize();
};

// Loss-free balancing's bias spread: the largest bias minus the smallest (0 without a bias).
double score_bias_spread(const RouterStatsInfo& l);

// AC statistics slots after the 2E per-cluster ones: tiny clusters, metric min, max, mean, calls.
inline constexpr int64_t kAcStatsFixed = 5;

// The device block of one MoE layer with E experts: f64 slots, all sums (+=) over the step's
// micro-batches, except the AC metric's min/max/mean (combined by the ac_stats kernel), the
// loss-free bias and the dispatch's row size (copied: they do not change within a step).
class RouterStatsLayout {
 public:
  enum Slot : int64_t {
    kTokens = 0,
    kSlots,
    kDroppedSlots,  // then kFullyDropped: the layout kernel's two counters
    kFullyDropped,
    kBalanceLossSum,  // then kZLossSum: balance * T and z * T per call
    kZLossSum,
    kAuxLoss,  // the weighted aux loss (balance_coef * balance + z_coef * z)
    kEntropySum,
    kOutputNormSum,
    kStateNormSum,
    kTop1GateSum,
    kUnmaskedSum,  // SparseMixer: the four sparsemixer_stats counters
    kSingleExpert,
    kNonArgmax,
    kHalved,
    kSeqBalanceLossSum,           // the sequence-wise balance loss * T per call
    kDispatchRowsUndeduplicated,  // then kDispatchRowsSent: the dedup layout kernel's counters
    kDispatchRowsSent,
    kDispatchRowBytes,  // copied: bytes per dispatched row, set with the two above
    kFixedSlots,
  };
  explicit RouterStatsLayout(int64_t experts) : experts_(experts) {}
  int64_t expert_load() const { return kFixedSlots; }    // [E]
  int64_t ac() const { return kFixedSlots + experts_; }  // [2E + kAcStatsFixed]
  // Loss-free balancing's bias as this step routed with it ([E], copied, not summed), then a
  // slot that is 1 when the layer has one.
  int64_t score_bias() const { return ac() + 2 * experts_ + kAcStatsFixed; }
  int64_t score_bias_set() const { return score_bias() + experts_; }
  int64_t size() const { return score_bias_set() + 1; }
  // Fills the counters of `info` (block, moe_index and the derived fields are the caller's)
  // from a block read back to the host.
  void read(const double* block, RouterStatsInfo* info) const;

 private:
  int64_t experts_;
};

}  // namespace moe
