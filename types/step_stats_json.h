// One statistics record as a one-line JSON object: what `momoe-stats --json` writes and what the
// trainer appends to RUN_DIR/metrics.jsonl while it runs (so any plotting tool can follow a run).
//
// A training step: step, loss, aux_loss, learning_rate, grad_norm, tokens, tokens_per_second,
// skipped, phase_seconds, peak_tensor_bytes and peak_rss_bytes (the step's memory peaks, when
// measured: types/step_stats.h), layers [per MoE layer: block, moe_index, tokens, expert_load,
// dropped_fraction, ...; with a deduplicating dispatch also dispatch_rows_sent,
// dispatch_rows_undeduplicated, dispatch_bytes_sent, dispatch_bytes_undeduplicated,
// dispatch_saved_fraction], anomalies. An
// evaluation: step, eval_sequences (per split; 0 = whole splits), valid_ppl,
// test_ppl, attacked_*, attack_rate, *_word_ppl, *_bits_per_byte, *_unknown_fraction. A marker:
// step, rollback_to (and interrupted: true when the run resumed after a kill rather than rolling
// back). `step` counts the steps done when the record was made, for every kind (a training step's
// record says N after its N-th step), as in stats.pb, the console and checkpoint names.
#pragma once

#include <string>

#include "types/step_stats.h"

namespace moe {

// True for a training step's record (not an evaluation or a marker).
inline bool is_training_step(const StepStatsInfo& s) {
  return !s.rollback_to && (s.tokens > 0 || !s.layers.empty());
}

std::string step_stats_json(const StepStatsInfo& s);

}  // namespace moe
