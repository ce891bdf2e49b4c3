// launcher/stats_export.h: momoe-stats's summary of where a step's time goes, from records whose
// phases are each the slowest rank's (a resume from EP 2 to EP 1 in the middle); the dispatch's
// exchange counters and the step's memory peaks in the table, the CSV and the JSON lines; a subset
// evaluation's measures per word and per byte labelled as estimates.
#include "launcher/stats_export.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "types/step_stats_json.h"

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

TEST(StatsExport, ASubsetEvaluationsPerWordMeasuresAreLabelledEstimates) {
  StepStatsInfo evaluation;
  evaluation.step = 1;
  evaluation.valid_ppl = 12.5;
  evaluation.valid_word_ppl = 12.5;
  evaluation.valid_bits_per_byte = 1.25;
  evaluation.valid_unknown_fraction = 0.25;
  for (int64_t sequences : {0, 8}) {
    evaluation.eval_sequences = sequences;
    const std::string table =
        summary_table({aggregate_step_stats({rank_record(1, 0, 0.1, 0.04, 0.05)}), evaluation}, 10);
    const bool subset = sequences > 0;
    EXPECT_EQ(table.find("last evaluation (step 1, first 8 sequences of each split):") !=
                  std::string::npos,
              subset)
        << table;
    EXPECT_EQ(table.find("(estimates at the whole split's tokens per word and per byte; 25.00% "
                         "of those sequences <unk>)") != std::string::npos,
              subset)
        << table;
    EXPECT_EQ(table.find("(25.00% of the valid text <unk>)") != std::string::npos, !subset)
        << table;
  }
}
TEST(StatsExport, PhasesWithinTheStepGetNoNote) {
  std::vector<StepStatsInfo> steps = {aggregate_step_stats({rank_record(1, 0, 0.1, 0.04, 0.05)}),
                                      aggregate_step_stats({rank_record(2, 0, 0.1, 0.04, 0.04)})};
  const std::string table = summary_table(steps, 10);
  EXPECT_NE(table.find("+ other 10.0 ms"), std::string::npos) << table;  // (5 + 15) / 2
  EXPECT_EQ(table.find("slowest rank"), std::string::npos) << table;
}

// The deduplicating dispatch's exchange counters: summed over ranks (the row size kept once),
// the saved share derived after aggregation, and shown by momoe-stats: the table's xch_saved, the
// CSV's rows and bytes (every row as wide as the header), the JSON lines.
TEST(StatsExport, DispatchExchangeCountersAggregateAndShow) {
  std::vector<StepStatsInfo> ranks = {rank_record(1, 0, 0.1, 0.04, 0.05),
                                      rank_record(1, 1, 0.1, 0.04, 0.05)};
  const int64_t sent[] = {30, 10}, undeduplicated[] = {50, 30};
  for (int r = 0; r < 2; ++r) {
    RouterStatsInfo l;
    l.block = 1;
    l.expert_load = {3, 1};
    l.dispatch_rows_sent = sent[r];
    l.dispatch_rows_undeduplicated = undeduplicated[r];
    l.dispatch_row_bytes = 1024;  // D = 512 in bf16
    ranks[r].layers.push_back(l);
  }
  StepStatsInfo evaluation;
  evaluation.step = 1;
  evaluation.valid_ppl = 12.5;
  const std::vector<StepStatsInfo> steps = {aggregate_step_stats(ranks), evaluation};
  const RouterStatsInfo& l = steps[0].layers[0];
  EXPECT_EQ(l.dispatch_rows_sent, 40);
  EXPECT_EQ(l.dispatch_rows_undeduplicated, 80);
  EXPECT_EQ(l.dispatch_row_bytes, 1024);
  EXPECT_DOUBLE_EQ(l.dispatch_saved_fraction, 0.5);  // 1 - 40 / 80

  const std::string table = summary_table(steps, 10);
  EXPECT_NE(table.find("bias_sp xch_saved\n"), std::string::npos) << table;
  EXPECT_NE(table.find("0.000     0.500\n"), std::string::npos) << table;

  const std::string json = step_stats_json(steps[0]);
  for (const char* field :
       {"\"dispatch_rows_sent\":40", "\"dispatch_rows_undeduplicated\":80",
        "\"dispatch_bytes_sent\":40960", "\"dispatch_bytes_undeduplicated\":81920",
        "\"dispatch_saved_fraction\":0.5"}) {
    EXPECT_NE(json.find(field), std::string::npos) << field << " not in " << json;
  }
  EXPECT_EQ(
      step_stats_json(aggregate_step_stats({rank_record(2, 0, 0.1, 0.04, 0.05)})).find("dispatch_"),
      std::string::npos)
      << "a dispatch without deduplication reports no exchange";

  const std::string path = ::testing::TempDir() + "stats_export_dispatch.csv";
  ASSERT_TRUE(write_csv(steps, path).ok());
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);  // header, the layer's row, the evaluation's row
  EXPECT_NE(lines[0].find(",score_bias_spread,dispatch_rows_sent,dispatch_rows_undeduplicated,"
                          "dispatch_bytes_sent,dispatch_bytes_undeduplicated,"
                          "dispatch_saved_fraction,expert_load,"),
            std::string::npos)
      << lines[0];
  EXPECT_NE(lines[1].find(",40,80,40960,81920,0.5,\"6 2\","), std::string::npos) << lines[1];
  for (const std::string& line : lines) {
    EXPECT_EQ(std::count(line.begin(), line.end(), ','),
              std::count(lines[0].begin(), lines[0].end(), ','))
        << line;
  }
  std::remove(path.c_str());
}

// The step's memory peaks: the largest rank's of each (a rank that did not measure one does not
// lower it), shown by momoe-stats: the summary's memory line, the CSV's last two columns (empty on
// an evaluation's row), the JSON lines.
TEST(StatsExport, MemoryPeaksAggregateAsTheLargestRanksAndShow) {
  std::vector<StepStatsInfo> ranks = {rank_record(1, 0, 0.1, 0.04, 0.05),
                                      rank_record(1, 1, 0.1, 0.04, 0.05),
                                      rank_record(1, 2, 0.1, 0.04, 0.05)};
  ranks[0].peak_tensor_bytes = int64_t{1} << 30;
  ranks[0].peak_rss_bytes = int64_t{2} << 30;
  ranks[1].peak_tensor_bytes = int64_t{3} << 29;  // 1.5 GiB, the largest
  ranks[2].peak_tensor_bytes = int64_t{1} << 29;  // no resident peak on this rank
  StepStatsInfo evaluation;
  evaluation.step = 1;
  evaluation.valid_ppl = 12.5;
  const std::vector<StepStatsInfo> steps = {aggregate_step_stats(ranks), evaluation};
  EXPECT_EQ(steps[0].peak_tensor_bytes, std::optional<int64_t>(int64_t{3} << 29));
  EXPECT_EQ(steps[0].peak_rss_bytes, std::optional<int64_t>(int64_t{2} << 30));
  EXPECT_FALSE(aggregate_step_stats({rank_record(2, 0, 0.1, 0.04, 0.05)}).peak_rss_bytes)
      << "no rank measured it: absent, not 0";

  const std::string table = summary_table(steps, 10);
  EXPECT_NE(table.find("peak memory per step (the largest of the last 1, the largest rank's): "
                       "tensors 1.500 GiB, resident 2.000 GiB"),
            std::string::npos)
      << table;
  const std::string json = step_stats_json(steps[0]);
  EXPECT_NE(json.find("\"peak_tensor_bytes\":1610612736"), std::string::npos) << json;
  EXPECT_NE(json.find("\"peak_rss_bytes\":2147483648"), std::string::npos) << json;
  EXPECT_EQ(step_stats_json(evaluation).find("peak_"), std::string::npos);

  RouterStatsInfo l;
  l.block = 1;
  l.expert_load = {3, 1};
  std::vector<StepStatsInfo> with_layer = steps;
  with_layer[0].layers.push_back(l);
  const std::string path = ::testing::TempDir() + "stats_export_memory.csv";
  ASSERT_TRUE(write_csv(with_layer, path).ok());
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);  // header, the layer's row, the evaluation's row
  const auto ends_with = [](const std::string& line, const std::string& end) {
    return line.size() >= end.size() &&
           line.compare(line.size() - end.size(), end.size(), end) == 0;
  };
  EXPECT_TRUE(ends_with(lines[0], ",eval_seconds,peak_tensor_bytes,peak_rss_bytes")) << lines[0];
  EXPECT_TRUE(ends_with(lines[1], ",,1610612736,2147483648")) << lines[1];
  EXPECT_TRUE(ends_with(lines[2], ",,")) << lines[2];
  for (const std::string& line : lines) {
    EXPECT_EQ(std::count(line.begin(), line.end(), ','),
              std::count(lines[0].begin(), lines[0].end(), ','))
        << line;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace moe
