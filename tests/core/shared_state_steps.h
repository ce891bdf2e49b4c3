// Two computation paths compared one step at a time from the same states. Over a long run a
// routing decision within rounding of a tie flips on one path and not the other, and from then
// on the two trajectories part (chaotically where many decisions sit near ties: top 8 of 16
// narrow experts in BF16). So a comparison of whole runs can only bound their distance by the
// flips' effects; from one shared state, only one step's roundings separate the paths, and the
// cross-path rule (tests/testing/cross_path.h: decisions counted first, then values) applies
// with its derived bounds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/core/trainer_test_util.h"
#include "types/run_config.h"

namespace moe::testing {

struct SharedStateStep {
  int64_t state = 0;    // the steps done at the shared state (the step taken is the next)
  TrainingRecord a, b;  // one step each
  std::vector<double> a_params, b_params;  // the masters after it (flat_parameters)
};
struct SharedStates {
  TrainingRecord lead;  // the lead's own steps, through the one after the last state
  std::vector<SharedStateStep> steps;
};

// `lead` trains in `dir`, saving a checkpoint after each of the steps `at` (ascending); from each,
// a trainer of config `a` and one of `b` resume (the same masters, optimizer state and next
// batch; each in a run directory of its own under `dir`) and take one step. `a` and `b` may
// differ from `lead` in device and precision only; where one is `lead` itself, its step equals
// the lead's own next step bit for bit (a resume is exact), which shows the state was shared.
// Failures are test failures; what was taken is returned.
SharedStates steps_from_shared_states(const RunConfig& lead, const RunConfig& a, const RunConfig& b,
                                      const std::vector<int64_t>& at, const std::string& dir);

}  // namespace moe::testing
