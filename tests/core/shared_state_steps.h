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
  std::vector<double> state_params;        // the masters at the state (flat_parameters)
  std::vector<double> a_params, b_params;  // the masters after each one's step
  std::vector<double> lead_params;         // the lead's after its own next step
};
struct SharedStates {
  TrainingRecord lead;  // the lead's own steps, through the one after the last state
  std::vector<SharedStateStep> steps;
};

// How far b's step moved the masters from a's: ||(b - state) - (a - state)|| / ||a - state||
// (L2 over every master; the update's own size is the scale, so a gradient or optimizer bug on
// one path, which changes the update's direction or size, shows where a loss cannot: the loss
// of a step is computed before its update). NaN when a's update is empty or zero.
double update_distance(const SharedStateStep& s);

// The cross-path rule for one step from a shared state (`s` of `states`; `a` the lead's own
// config): the state was shared (a's loss, gradient norm and masters after the step equal the
// lead's own next step's, bit for bit); decisions counted; b's loss within `tol.loss` of a's,
// relative; where no decision moved, the gradient norm within `tol.grad_norm` and the masters'
// step (update_distance) within `tol.update` too (a moved token's gradient goes to other
// experts: not a rounding); at every step no master past one step's reach
// (expect_parameters_close with `scale`). Failures name `at`. Returns the differences, for the
// test's report.
struct StepDifference {
  double loss = 0, grad_norm = 0, update = 0;  // relative
  int64_t moved = 0;                           // tokens routed otherwise
};
// Relative bounds on the three. The gradient norm is one sum over every entry (independent
// roundings mostly cancel in it); the masters' step is an L2 distance over every entry (they
// add up), so its bound is the entries' own (cross_path.h's bf16_backward_bound).
struct StepTolerances {
  double loss = 0, grad_norm = 0, update = 0;
};
StepDifference expect_step_from_shared_state(const SharedStates& states, const SharedStateStep& s,
                                             const StepTolerances& tol, const TrainingScale& scale,
                                             const std::string& at);

// `lead` trains in `dir`, saving a checkpoint after each of the steps `at` (ascending); from each,
// a trainer of config `a` and one of `b` resume (the same masters, optimizer state and next
// batch; each in a run directory of its own under `dir`) and take one step. `a` and `b` may
// differ from `lead` in device and precision only; where one is `lead` itself, its step's loss,
// gradient norm and masters after it equal the lead's own next step's bit for bit (a resume is
// exact; the masters after the step carry the optimizer state), which shows the state was
// shared. Failures are test failures; what was taken is returned.
SharedStates steps_from_shared_states(const RunConfig& lead, const RunConfig& a, const RunConfig& b,
                                      const std::vector<int64_t>& at, const std::string& dir);

}  // namespace moe::testing
