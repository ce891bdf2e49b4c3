#include "types/step_stats.h"

#include <algorithm>

#include "base/check.h"

namespace moe {
namespace {

// The larger of two optional peaks (absent on both: absent).
std::optional<int64_t> max_of(std::optional<int64_t> a, std::optional<int64_t> b) {
  if (!a) return b;
  if (!b) return a;
  return std::max(*a, *b);
}

}  // namespace

StepStatsInfo aggregate_step_stats(const std::vector<StepStatsInfo>& per_rank) {
  MOE_CHECK(!per_rank.empty(), "no statistics to aggregate");
  StepStatsInfo out = per_rank[0];
  out.rank = -1;
  double loss_sum = 0, aux_sum = 0;
  int64_t tokens = 0;
  for (const StepStatsInfo& s : per_rank) {
    loss_sum += s.loss * static_cast<double>(s.tokens);
    aux_sum += s.aux_loss * static_cast<double>(s.tokens);
    tokens += s.tokens;
    out.step_seconds = std::max(out.step_seconds, s.step_seconds);
    out.skipped = out.skipped || s.skipped;
    if (s.phases) {
      if (!out.phases) out.phases = PhaseSecondsArray{};
      for (int p = 0; p < kNumPhases; ++p)
        (*out.phases)[p] = std::max((*out.phases)[p], (*s.phases)[p]);
    }
    out.peak_tensor_bytes = max_of(out.peak_tensor_bytes, s.peak_tensor_bytes);
    out.peak_rss_bytes = max_of(out.peak_rss_bytes, s.peak_rss_bytes);
  }
  out.tokens = tokens;
  out.loss = tokens > 0 ? loss_sum / static_cast<double>(tokens) : per_rank[0].loss;
  out.aux_loss = tokens > 0 ? aux_sum / static_cast<double>(tokens) : per_rank[0].aux_loss;
  out.tokens_per_second = out.step_seconds > 0 ? static_cast<double>(tokens) / out.step_seconds : 0;
  for (size_t r = 1; r < per_rank.size(); ++r) {
    MOE_CHECK(per_rank[r].layers.size() == out.layers.size(), "rank ", per_rank[r].rank,
              " reports ", per_rank[r].layers.size(), " MoE layers, rank 0 ", out.layers.size());
    for (size_t l = 0; l < out.layers.size(); ++l) out.layers[l].merge(per_rank[r].layers[l]);
    for (const std::string& a : per_rank[r].anomalies) out.anomalies.push_back(a);
  }
  for (RouterStatsInfo& l : out.layers) l.finalize();
  return out;
}

std::vector<std::pair<const char*, std::optional<double>>> evaluation_measures(
    const StepStatsInfo& s) {
  return {{"valid_ppl", s.valid_ppl},
          {"test_ppl", s.test_ppl},
          {"attacked_valid_ppl", s.attacked_valid_ppl},
          {"attacked_test_ppl", s.attacked_test_ppl},
          {"attack_rate", s.attack_rate},
          {"valid_word_ppl", s.valid_word_ppl},
          {"test_word_ppl", s.test_word_ppl},
          {"valid_bits_per_byte", s.valid_bits_per_byte},
          {"test_bits_per_byte", s.test_bits_per_byte},
          {"valid_unknown_fraction", s.valid_unknown_fraction},
          {"test_unknown_fraction", s.test_unknown_fraction}};
}

}  // namespace moe
