// One statistics record as TensorBoard scalars: the tags and values that the trainer writes to
// its event files (proto/event_file.h), beside the JSON line of the same record
// (types/step_stats_json.h). The tags, by record:
//   training step  train/{loss, perplexity, aux_loss, learning_rate, grad_norm, tokens_per_second,
//                  step_seconds, skipped}, time/<phase> (seconds; base/phase_timer.h's names),
//                  memory/{peak_tensor_gib, peak_rss_gib} (the step's peaks in GiB, when
//                  measured: types/step_stats.h),
//                  and per MoE layer block<b>/{balance_loss, z_loss, seq_balance_loss, drop_rate,
//                  max_load, entropy, probe_flip_rate} and block<b>/expert_load/<e> (expert e's
//                  share of the layer's routed assignments: the shares sum to 1)
//   evaluation     eval/ (whole splits) or eval_subset/ (the first eval_sequences of each split)
//                  {valid_ppl, test_ppl, attacked_valid_ppl, attacked_test_ppl, attack_rate,
//                  valid_word_ppl, test_word_ppl, valid_bits_per_byte, test_bits_per_byte,
//                  valid_unknown_fraction, test_unknown_fraction, seconds}, those the record has
//   rollback marker  none (the event file's SessionLog START says it)
// The step is the record's own: the number of steps done (README, "One step numbering"), so that a
// step's loss and the evaluation after it share a step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "types/step_stats.h"

namespace moe {

struct NamedScalar {
  std::string tag;
  double value = 0;
};

// The record's step on TensorBoard's axis (see above).
int64_t scalar_step(const StepStatsInfo& s);

// The record's scalars, in a fixed order (empty for a rollback marker).
std::vector<NamedScalar> step_stats_scalars(const StepStatsInfo& s);

}  // namespace moe
