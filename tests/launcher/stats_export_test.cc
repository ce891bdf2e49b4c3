// launcher/stats_export.h: momoe-stats's summary of where a step's time goes, from records whose
// phases are each the slowest rank's (a resume from EP 2 to EP 1 in the middle).
#include "launcher/stats_export.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace moe {
namespace {

// One rank's training record of step `step`: `seconds` in all, forward and backward as given.
StepStatsInfo rank_record(int64_t step, int rank, double seconds, double forward, double backward) {
  StepStatsInfo s;
  s.step = step;
  s.rank = rank;
  s.tokens = 64;
  s.loss = 3;
  s.step_seconds = seconds;
  PhaseSecondsArray phases{};
  phases[static_cast<int>(Phase::kData)] = 0.001;
  phases[static_cast<int>(Phase::kForward)] = forward;
  phases[static_cast<int>(Phase::kBackward)] = backward;
  phases[static_cast<int>(Phase::kExchange)] = 0.004;  // part of forward and backward
  phases[static_cast<int>(Phase::kGradSync)] = 0.002;
  phases[static_cast<int>(Phase::kOptimizer)] = 0.002;
  s.phases = phases;
  return s;
}

TEST(StatsExport, OtherTimeIsNeverNegative) {
  std::vector<StepStatsInfo> steps;
  // EP 2: rank 0 is slow forward, rank 1 backward; the slowest per phase add up to 125 ms of a
  // 100 ms step (other -25 ms).
  steps.push_back(aggregate_step_stats(
      {rank_record(1, 0, 0.100, 0.060, 0.030), rank_record(1, 1, 0.100, 0.030, 0.060)}));
  // Resumed at EP 1: 100 ms, of which 95 ms in phases (other 5 ms).
  steps.push_back(aggregate_step_stats({rank_record(2, 0, 0.100, 0.040, 0.050)}));
  const std::string table = summary_table(steps, 10);
  EXPECT_EQ(table.find("other -"), std::string::npos) << table;
  // Other: (0 + 5 ms) / 2, the EP 2 step's counted as 0, and a note saying why.
  EXPECT_NE(table.find("+ other 2.5 ms"), std::string::npos) << table;
  EXPECT_NE(table.find("in 1 of these steps the phases, each the slowest rank's, add up to more "
                       "than the step, by up to 25.0 ms"),
            std::string::npos)
      << table;
  // The phases themselves are reported as recorded (the mean of the slowest ranks').
  EXPECT_NE(table.find("100.0 ms = data 1.0 + forward 50.0 + backward 55.0"), std::string::npos)
      << table;
}

TEST(StatsExport, PhasesWithinTheStepGetNoNote) {
  std::vector<StepStatsInfo> steps = {aggregate_step_stats({rank_record(1, 0, 0.1, 0.04, 0.05)}),
                                      aggregate_step_stats({rank_record(2, 0, 0.1, 0.04, 0.04)})};
  const std::string table = summary_table(steps, 10);
  EXPECT_NE(table.find("+ other 10.0 ms"), std::string::npos) << table;  // (5 + 15) / 2
  EXPECT_EQ(table.find("slowest rank"), std::string::npos) << table;
}

}  // namespace
}  // namespace moe
