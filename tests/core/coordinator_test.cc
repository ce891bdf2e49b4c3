// The coordinator on one rank: aggregation into stats.pb, the progress line, the anomalies it
// reports (a non-finite loss, a collapsed layer), the TensorBoard event file beside
// metrics.jsonl (train.tensorboard), and the step's memory peaks on metrics.jsonl's training
// lines.
#include "core/train/coordinator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "proto/event_file.h"
#include "proto/stats_convert.h"
#include "tests/core/trainer_test_util.h"

namespace moe::testing {
namespace {

RouterStatsInfo layer(std::vector<int64_t> load) {
  RouterStatsInfo l;
  l.block = 1;
  l.tokens = 0;
  for (int64_t c : load) l.tokens += c;
  l.slots = l.tokens;
  l.expert_load = std::move(load);
  return l;
}

TEST(CoordinatorTest, FlagsCollapseAndNonFiniteLossAndWritesStats) {
  const std::string dir = fresh_dir("coordinator");
  RunConfig cfg;
  cfg.train.collapse_threshold = 3.0;
  std::FILE* progress = std::tmpfile();
  Coordinator c(cfg, nullptr, dir + "/stats.pb", progress);

  StepStatsInfo balanced;
  balanced.step = 1;  // steps done after it, as the trainer numbers its records
  balanced.loss = 2.0;
  balanced.tokens = 40;
  balanced.layers.push_back(layer({10, 10, 10, 10}));
  StatusOr<StepStatsInfo> a = c.report_step(balanced, {0.25}, 10);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->anomalies.empty());
  EXPECT_DOUBLE_EQ(a->layers[0].max_load, 1.0);
  EXPECT_DOUBLE_EQ(a->layers[0].probe_flip_rate, 0.25);

  StepStatsInfo collapsed = balanced;
  collapsed.step = 2;
  collapsed.loss = std::nan("");
  collapsed.layers[0] = layer({37, 1, 1, 1});  // max load 37 / 10 = 3.7x the mean
  StatusOr<StepStatsInfo> b = c.report_step(collapsed, {}, 10);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->anomalies.size(), 2u);
  EXPECT_NE(b->anomalies[0].find("non-finite loss"), std::string::npos);
  EXPECT_NE(b->anomalies[1].find("block 1 routing collapsed"), std::string::npos)
      << b->anomalies[1];

  StatusOr<StatsFileContents> stats = read_stats_file(dir + "/stats.pb");
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->steps.size(), 2u);
  EXPECT_EQ(stats->steps[1].anomalies.size(), 2u);
  EXPECT_EQ(stats->steps[0].layers[0].expert_load, (std::vector<int64_t>{10, 10, 10, 10}));
  std::rewind(progress);
  char line[512] = {0};
  ASSERT_NE(std::fgets(line, sizeof(line), progress), nullptr);
  EXPECT_NE(std::string(line).find("step 1/10 | loss 2.0000"), std::string::npos) << line;
  std::fclose(progress);
  std::filesystem::remove_all(dir);
}

// A layer that stays collapsed is an anomaly of every step's record, but the console and
// metrics.jsonl hear of it when it collapses and when it recovers, not at every step between
// (a stock preset's early training would otherwise print hundreds of warnings).
TEST(CoordinatorTest, ACollapseIsAnnouncedOnceUntilItRecovers) {
  const std::string dir = fresh_dir("coordinator_collapse");
  RunConfig cfg;
  cfg.train.collapse_threshold = 3.0;
  cfg.train.log_every = 50;
  std::FILE* progress = std::tmpfile();
  Coordinator c(cfg, nullptr, dir + "/stats.pb", progress);
  for (int64_t step = 1; step <= 6; ++step) {
    StepStatsInfo s;
    s.step = step;
    s.loss = 2.0;
    s.tokens = 40;
    const bool collapsed = step >= 2 && step <= 4;
    s.layers.push_back(collapsed ? layer({37, 1, 1, 1}) : layer({10, 10, 10, 10}));
    StatusOr<StepStatsInfo> r = c.report_step(s, {}, 100);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->anomalies.size(), collapsed ? 1u : 0u) << "step " << step;
  }
  std::rewind(progress);
  std::vector<std::string> printed;
  char line[512] = {0};
  while (std::fgets(line, sizeof(line), progress) != nullptr) printed.push_back(line);
  std::fclose(progress);
  ASSERT_EQ(printed.size(), 2u);  // step 2 (collapsed) and step 5 (recovered)
  EXPECT_EQ(printed[0].rfind("step 2/100", 0), 0u) << printed[0];
  EXPECT_EQ(printed[1].rfind("step 5/100", 0), 0u) << printed[1];
  StatusOr<StatsFileContents> stats = read_stats_file(dir + "/stats.pb");
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->steps.size(), 6u);
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(stats->steps[i].anomalies.size(), 1u) << i;
  std::filesystem::remove_all(dir);
}

// The event file gets what metrics.jsonl gets, at the same moments: a START at the step the run
// starts from, one event per logged step (at steps done) and per evaluation; a rollback marker
// has no scalars. train.tensorboard = false writes no event file.
TEST(CoordinatorTest, WritesTensorBoardEventsWithMetrics) {
  const std::string dir = fresh_dir("coordinator_events");
  RunConfig cfg;
  cfg.train.log_every = 2;
  std::vector<std::string> files;
  {
    Coordinator c(cfg, nullptr, dir + "/stats.pb", nullptr);
    c.report_start(4);
    StepStatsInfo s;
    s.loss = 2.0;
    s.tokens = 40;
    s.layers.push_back(layer({10, 10, 20, 0}));
    for (int64_t step = 5; step <= 6; ++step) {  // steps done after each
      s.step = step;
      ASSERT_TRUE(c.report_step(s, {}, 10).ok());
    }
    StepStatsInfo eval;
    eval.step = 6;
    eval.eval_sequences = 0;
    eval.valid_ppl = 120.0;
    c.report_eval(eval);
    c.report_rollback(2);
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (is_event_file_name(e.path().filename().string())) files.push_back(e.path().string());
    }
  }
  ASSERT_EQ(files.size(), 1u);
  StatusOr<EventFileContents> got = read_event_file(files[0]);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->events.size(), 4u);  // file_version, START, step 6 (logged: log_every 2), eval
  EXPECT_EQ(got->events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(got->events[1].session_start);
  EXPECT_EQ(got->events[1].step, 5);
  EXPECT_EQ(got->events[2].step, 6);
  EXPECT_EQ(got->events[2].scalars.at(0).tag, "train/loss");
  EXPECT_EQ(got->events[2].scalars.at(0).value, 2.0);
  bool load = false;
  for (const NamedScalar& v : got->events[2].scalars) {
    if (v.tag == "block1/expert_load/2") load = (v.value == 0.5);
  }
  EXPECT_TRUE(load) << "no block1/expert_load/2 = 0.5";
  EXPECT_EQ(got->events[3].step, 6);
  ASSERT_EQ(got->events[3].scalars.size(), 1u);
  EXPECT_EQ(got->events[3].scalars[0].tag, "eval/valid_ppl");
  EXPECT_EQ(got->events[3].scalars[0].value, 120.0);
  std::filesystem::remove_all(dir);

  const std::string off = fresh_dir("coordinator_events_off");
  cfg.train.tensorboard = false;
  {
    Coordinator c(cfg, nullptr, off + "/stats.pb", nullptr);
    c.report_start(0);
    StepStatsInfo s;
    s.tokens = 40;
    ASSERT_TRUE(c.report_step(s, {}, 1).ok());
  }
  for (const auto& e : std::filesystem::directory_iterator(off)) {
    EXPECT_FALSE(is_event_file_name(e.path().filename().string())) << e.path();
  }
  EXPECT_TRUE(std::filesystem::exists(off + "/metrics.jsonl"));
  std::filesystem::remove_all(off);
}

// The step's memory peaks reach metrics.jsonl on training lines, as measured; an evaluation's
// line has none.
TEST(CoordinatorTest, MetricsCarryMemoryPeaksOnTrainingLinesOnly) {
  const std::string dir = fresh_dir("coordinator_memory");
  RunConfig cfg;
  {
    Coordinator c(cfg, nullptr, dir + "/stats.pb", nullptr);
    c.report_start(0);
    StepStatsInfo s;
    s.step = 1;
    s.loss = 2.0;
    s.tokens = 40;
    s.peak_tensor_bytes = 123456789;
    s.peak_rss_bytes = 987654321;
    ASSERT_TRUE(c.report_step(s, {}, 1).ok());
    StepStatsInfo eval;
    eval.step = 1;
    eval.eval_sequences = 0;
    eval.valid_ppl = 120.0;
    c.report_eval(eval);
  }
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("\"peak_tensor_bytes\":123456789"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"peak_rss_bytes\":987654321"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("\"valid_ppl\""), std::string::npos) << lines[1];
  EXPECT_EQ(lines[1].find("peak_"), std::string::npos) << lines[1];
  std::filesystem::remove_all(dir);
}

// Why the balance loss can read 1.0 while tokens are dropped: E sum_e f_e P_e with the router's
// mean probabilities P uniform (P_e = 1/E, as at initialisation) is sum_e f_e = 1 however the
// tokens are assigned. Hand-computed: 4 experts, 40 tokens all routed to expert 0, capacity 10
// (30 dropped), P uniform: balance 1.0, load max 4.0; the progress line shows both.
TEST(CoordinatorTest, TheBalanceLossDoesNotSeeImbalanceUnderUniformProbabilities) {
  const std::string dir = fresh_dir("coordinator_balance");
  RunConfig cfg;
  cfg.train.collapse_threshold = 10.0;
  std::FILE* progress = std::tmpfile();
  Coordinator c(cfg, nullptr, dir + "/stats.pb", progress);
  StepStatsInfo s;
  s.step = 1;
  s.loss = 3.0;
  s.tokens = 40;
  RouterStatsInfo l = layer({40, 0, 0, 0});
  l.dropped_slots = 30;
  // balance_loss_sum = T * E * sum_e f_e P_e with f = (1, 0, 0, 0), P = 1/4 each.
  l.balance_loss_sum = 40 * 4 * (1.0 * 0.25);
  s.layers.push_back(l);
  StatusOr<StepStatsInfo> r = c.report_step(s, {}, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->layers[0].balance_loss, 1.0);
  EXPECT_DOUBLE_EQ(r->layers[0].max_load, 4.0);
  EXPECT_DOUBLE_EQ(r->layers[0].dropped_fraction, 0.75);
  std::rewind(progress);
  char line[512] = {0};
  ASSERT_NE(std::fgets(line, sizeof(line), progress), nullptr);
  EXPECT_NE(std::string(line).find("| bal 1.000 | load max 4.00 | "), std::string::npos) << line;
  EXPECT_NE(std::string(line).find("| drop 75.00% |"), std::string::npos) << line;
  std::fclose(progress);
  std::filesystem::remove_all(dir);
}

// The achieved model FLOP/s is tokens/s x FLOPs per token (set_compute), and the MFU its share of
// the devices' measured rate, shown only when a rate is known: 2000 tokens in 1 s at 1 MFLOP
// each is 2 GFLOP/s, half of 4 GFLOP/s.
TEST(CoordinatorTest, TheProgressLineShowsFlopsAndMfu) {
  RunConfig cfg;
  StepStatsInfo s;
  s.tokens = 2000;
  s.step_seconds = 1.0;
  s.loss = 1.0;
  for (const double peak : {4e9, 0.0}) {
    std::FILE* progress = std::tmpfile();
    Coordinator c(cfg, nullptr, "", progress);
    c.set_compute(1e6, peak);
    ASSERT_TRUE(c.report_step(s, {}, 1).ok());
    std::rewind(progress);
    char line[512] = {0};
    ASSERT_NE(std::fgets(line, sizeof(line), progress), nullptr);
    EXPECT_NE(std::string(line).find(" tok/s | 2 GFLOP/s | "), std::string::npos) << line;
    EXPECT_EQ(std::string(line).find("| MFU 50.0% | ETA") != std::string::npos, peak > 0) << line;
    std::fclose(progress);
  }
}

}  // namespace
}  // namespace moe::testing
