// What would make a run fit its memory: when the estimate (memory_estimate.h) exceeds what a
// host or GPU has, the refusal names the settings that fit, each one change of the config
// (gradient accumulation for a smaller micro-batch, activation recomputation, the distributed
// optimizer over several ranks, BF16, the loss in chunks of 1024 tokens with recomputation), or,
// when no single change fits, them all together, with the bytes each would need.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "types/run_config.h"

namespace moe {

struct FittingSetting {
  std::string overrides;  // "train.grad_accum=4 train.precision=BF16" (--set KEY=VALUE each)
  int64_t bytes = 0;      // what the run needs with it, on the memory in question
};

// `need(c)`: the bytes config c needs on the memory in question (the per-rank estimate times the
// ranks sharing it). world_size: the ranks the batch is split over. Single changes first (the
// smallest gradient accumulation that fits), then the combination; empty when nothing fits.
std::vector<FittingSetting> settings_that_fit(const RunConfig& cfg, int world_size,
                                              int64_t available,
                                              const std::function<int64_t(const RunConfig&)>& need);

// "; it fits with --set train.grad_accum=4 (1.20 GiB) or --set train.precision=BF16 (1.51
// GiB)", or "" when nothing fits.
std::string fitting_settings_text(const std::vector<FittingSetting>& settings);

}  // namespace moe
