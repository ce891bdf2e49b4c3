// Plain statistics of one training step (the struct behind stats.proto's StepStats): the loss,
// the optimiser state, timing, and one RouterStatsInfo per MoE layer. Every rank fills its own;
// the coordinator merges them (sums of counters, token-weighted means of losses).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/phase_timer.h"
#include "types/router_stats.h"

namespace moe {

struct StepStatsInfo {
  int64_t step = 0;
  int32_t rank = 0;     // -1 once aggregated
  double loss = 0;      // mean token cross-entropy over this rank's tokens
  double aux_loss = 0;  // weighted balance + z losses summed over layers (mean over micro-batches)
  double learning_rate = 0;
  double grad_norm = 0;
  int64_t tokens = 0;
  double step_seconds = 0;
  double tokens_per_second = 0;
  bool skipped = false;
  std::vector<RouterStatsInfo> layers;
  std::vector<std::string> anomalies;
  std::optional<double> valid_ppl, test_ppl, attacked_valid_ppl, attacked_test_ppl, attack_rate;
  // Per word and per byte; of a subset (eval_sequences > 0), estimates at the whole split's
  // tokens per word and per byte (core/train/evaluator.h).
  std::optional<double> valid_word_ppl, test_word_ppl, valid_bits_per_byte, test_bits_per_byte;
  // The evaluated text's <unk> share beside them (a subset's own): per-word measures compare
  // across tokenizers only at equal shares.
  std::optional<double> valid_unknown_fraction, test_unknown_fraction;
  std::optional<int64_t> eval_sequences;  // an evaluation's sequences per split (0 = whole splits)
  // Seconds per phase of the step (base/phase_timer.h, indexed by Phase); the slowest rank's
  // per phase once aggregated. Training records only.
  std::optional<PhaseSecondsArray> phases;
  std::optional<double> eval_seconds;  // an evaluation's wall-clock seconds
  // Memory the step used, measured on the host (core/train/trainer.cc); the largest rank's once
  // aggregated. Training records only. peak_tensor_bytes: the peak of the bytes the rank's tensor
  // allocator had handed out during the step (its peak is reset at the step's start; on a GPU
  // the CUDA pool allocator's host-side count), parameters, gradients and optimizer state
  // included. peak_rss_bytes: the process's resident high-water mark on the host (VmHWM), reset
  // at the step's start where Linux allows it (base/process_memory.h), else since the process
  // started; with ranks that are threads, the whole process's (every rank together).
  std::optional<int64_t> peak_tensor_bytes, peak_rss_bytes;
  // Set on a marker record only: the run resumed from the checkpoint of this many steps, and the
  // records of later steps before the marker are not part of the run any more. interrupted: the
  // run was killed after that checkpoint and resumed from it (else it rolled back to an older
  // checkpoint on purpose, --resume-from).
  std::optional<int64_t> rollback_to;
  bool interrupted = false;
};

// Merges per-rank statistics of one step: counters add, losses are token-weighted, the slowest
// rank's time and the largest rank's memory peaks count, layers merge by position, and derived
// router fields are finalized.
StepStatsInfo aggregate_step_stats(const std::vector<StepStatsInfo>& per_rank);

// An evaluation record's measures by name, in one fixed order (valid_ppl, test_ppl,
// attacked_valid_ppl, attacked_test_ppl, attack_rate, valid_word_ppl, test_word_ppl,
// valid_bits_per_byte, test_bits_per_byte, valid_unknown_fraction, test_unknown_fraction): the
// keys of its JSON line and of its TensorBoard scalars. Absent ones are nullopt.
std::vector<std::pair<const char*, std::optional<double>>> evaluation_measures(
    const StepStatsInfo& s);

}  // namespace moe
