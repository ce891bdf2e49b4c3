#include "tests/core/shared_state_steps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "base/status.h"

namespace moe::testing {
namespace {

// A trainer of `cfg` resumed in `run_dir` from the checkpoint `from`, one step: its record into
// `r` and its masters after the step into `params`.
void one_step_from(const RunConfig& cfg, const std::string& from, int64_t state,
                   const std::string& run_dir, TrainingRecord& r, std::vector<double>& params) {
  TrainerOptions o = quiet_options(run_dir, true);
  o.resume_from = from;
  StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(cfg, o, nullptr);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return;
  EXPECT_EQ((*t)->steps_done(), state) << run_dir << " did not resume from " << from;
  StatusOr<StepStatsInfo> s = (*t)->step();
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return;
  r.add(*s);
  params = flat_parameters((*t)->model());
}

// Steps the lead until it has done `steps`, recording each; false on a failure.
bool step_lead_to(Trainer& t, int64_t steps, TrainingRecord& record) {
  while (t.steps_done() < steps) {
    StatusOr<StepStatsInfo> s = t.step();
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (!s.ok()) return false;
    record.add(*s);
  }
  return true;
}

}  // namespace

double update_distance(const SharedStateStep& s) {
  const size_t n = s.state_params.size();
  if (n == 0 || s.a_params.size() != n || s.b_params.size() != n) return std::nan("");
  double diff = 0, size = 0;
  for (size_t i = 0; i < n; ++i) {
    const double ua = s.a_params[i] - s.state_params[i], ub = s.b_params[i] - s.state_params[i];
    diff += (ub - ua) * (ub - ua);
    size += ua * ua;
  }
  return size > 0 ? std::sqrt(diff / size) : std::nan("");
}

StepDifference expect_step_from_shared_state(const SharedStates& states, const SharedStateStep& s,
                                             const StepTolerances& tol, const TrainingScale& scale,
                                             const std::string& at) {
  StepDifference d;
  if (s.a.losses.size() != 1 || s.b.losses.size() != 1 ||
      states.lead.losses.size() <= static_cast<size_t>(s.state)) {
    ADD_FAILURE() << at << ": a step is missing";
    return d;
  }
  EXPECT_EQ(s.a.losses[0], states.lead.losses[s.state]) << at << ": the state was not shared";
  EXPECT_EQ(s.a.grad_norms[0], states.lead.grad_norms[s.state]) << at;
  EXPECT_EQ(s.a_params, s.lead_params) << at << ": the optimizer state was not shared";
  d.loss = std::fabs(s.b.losses[0] - s.a.losses[0]) / std::fabs(s.a.losses[0]);
  EXPECT_LE(d.loss, tol.loss) << at << ": loss " << s.a.losses[0] << " vs " << s.b.losses[0];
  d.grad_norm = std::fabs(s.b.grad_norms[0] - s.a.grad_norms[0]) / s.a.grad_norms[0];
  d.update = update_distance(s);
  const RoutingDifference routing = routing_difference(s.a, s.b);
  d.moved = routing.moved;
  if (d.moved == 0) {
    EXPECT_LE(d.grad_norm, tol.grad_norm) << at << ": gradient norm";
    EXPECT_LE(d.update, tol.update) << at << ": the masters' step";
  }
  expect_parameters_close(s.a_params, s.b_params, routing, scale, 1, at);
  return d;
}

SharedStates steps_from_shared_states(const RunConfig& lead, const RunConfig& a, const RunConfig& b,
                                      const std::vector<int64_t>& at, const std::string& dir) {
  SharedStates out;
  StatusOr<std::unique_ptr<Trainer>> t =
      Trainer::create(lead, quiet_options(dir + "/lead", false), nullptr);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return out;
  for (const int64_t state : at) {
    if (!step_lead_to(**t, state, out.lead)) return out;
    // Each state is used before the lead moves on (it keeps only its newest checkpoints).
    StatusOr<std::string> saved = (*t)->save();
    EXPECT_TRUE(saved.ok()) << saved.status().to_string();
    if (!saved.ok()) return out;
    SharedStateStep pair;
    pair.state = state;
    pair.state_params = flat_parameters((*t)->model());
    one_step_from(a, *saved, state, str_cat(dir, "/a", state), pair.a, pair.a_params);
    one_step_from(b, *saved, state, str_cat(dir, "/b", state), pair.b, pair.b_params);
    // The lead's own next step and the masters after it (its optimizer state shows in them).
    if (!step_lead_to(**t, state + 1, out.lead)) return out;
    pair.lead_params = flat_parameters((*t)->model());
    out.steps.push_back(std::move(pair));
  }
  return out;
}

}  // namespace moe::testing
