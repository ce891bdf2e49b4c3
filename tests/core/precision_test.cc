// The BF16 precision policy on the CPU (train.precision): every model family in configs/ (their
// arch, router and residual settings, shrunk to test size on a small real corpus) trains 100
// steps in BF16 with per-step losses close to FP32 from the same initial masters; two BF16 runs
// are bit-identical; checkpoints hold fp32 masters whatever the precision, so a BF16 run resumes
// as FP32 and an FP32 run as BF16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/checkpoint/checkpoint_io.h"
#include "proto/run_convert.h"
#include "tests/core/shared_state_steps.h"
#include "tests/core/trainer_test_util.h"
#include "tests/testing/cross_path.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

// BF16 against FP32 is a cross-path comparison (tests/testing/cross_path.h): routing decisions
// are counted and reported (bf16 rounding flips near-ties; over 100 steps the runs route
// differently), and every per-step loss stays within bf16's epsilon (2^-7) of the FP32 run's,
// relative: one bf16 rounding of the loss itself (each stage rounds its outputs to 8 significant
// bits; the tokens' independent rounding errors average out in the mean loss, and float32's
// bound is far below). The worst figure per family is in the test's log line.
constexpr double kBf16LossTolerance = kBf16Eps;

class PrecisionTest
    : public SmallCorpusSuite<PrecisionTest, ::testing::TestWithParam<std::string>> {
 protected:
  // The family's config at test size: its arch, routing and residual settings, small widths.
  static StatusOr<RunConfig> config(const std::string& family, const std::string& precision,
                                    int64_t steps) {
    return small_family_config(family, *corpus_, steps, {"train.precision=" + precision});
  }

  static TrainingRecord train(const std::string& family, const std::string& precision,
                              const std::string& run_dir, int steps) {
    TrainingRecord r;
    StatusOr<RunConfig> cfg = config(family, precision, steps);
    EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
    StatusOr<std::unique_ptr<Trainer>> t =
        Trainer::create(*cfg, quiet_options(run_dir, false), nullptr);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    for (int i = 0; i < steps && t.ok(); ++i) {
      StatusOr<StepStatsInfo> s = (*t)->step();
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (!s.ok()) break;
      r.add(*s);
    }
    return r;
  }
};

TEST_P(PrecisionTest, Bf16TracksFp32AndIsDeterministic) {
  const std::string family = GetParam();
  const std::string dir = fresh_dir("precision_" + family);
  const TrainingRecord fp32_run = train(family, "FP32", dir + "/fp32", 100);
  const TrainingRecord bf16_run = train(family, "BF16", dir + "/bf16", 100);
  const TrainingRecord again = train(family, "BF16", dir + "/bf16_again", 100);
  const std::vector<double>& fp32 = fp32_run.losses;
  const std::vector<double>& bf16 = bf16_run.losses;
  ASSERT_EQ(fp32.size(), 100u);
  ASSERT_EQ(bf16.size(), 100u);
  EXPECT_EQ(bf16, again.losses) << "two BF16 runs differ (the same path: bit equality)";
  const RoutingDifference routing = routing_difference(fp32_run, bf16_run);
  double worst = 0;
  for (size_t i = 0; i < fp32.size(); ++i) {
    const double rel = std::fabs(bf16[i] - fp32[i]) / std::fabs(fp32[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, kBf16LossTolerance)
        << "step " << i << ": fp32 " << fp32[i] << ", bf16 " << bf16[i];
  }
  EXPECT_LT(bf16.back(), bf16.front() - 1.0) << "BF16 training does not learn";
  std::printf(
      "[ precision ] %s: loss %.4f -> %.4f (fp32 %.4f), worst per-step |bf16 - fp32| / "
      "fp32 = %.4f; routing: %lld token(s) moved, first at step %lld\n",
      family.c_str(), bf16.front(), bf16.back(), fp32.back(), worst,
      static_cast<long long>(routing.moved), static_cast<long long>(routing.first));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Configs, PrecisionTest, ::testing::ValuesIn(config_families()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// BF16 against FP32 one step at a time from the FP32 run's states (shared_state_steps.h), for
// every family, the modern ones too: there whole runs part (top 8 of 16 narrow experts sit near
// ties: two OpenBLAS kernels' BF16 runs of Qwen3-MoE differ by over 1% within 100 steps), while
// from one state only that step's roundings separate the paths. The same rule as above, per
// step: decisions counted, the loss within bf16's epsilon of FP32's. The GPU's BF16 check
// (gpu_training_test.cc) compares its steps with the CPU's this way.
class SharedStatePrecisionTest : public PrecisionTest {};

// One BF16 step against the FP32 step from the same FP32 state (`s` of `states`): the FP32 one
// is the FP32 run's own (the state was shared: masters, optimizer state, batch); the loss within
// bf16's epsilon. The backward and the update, which the loss (computed before the update)
// cannot show, by the cross-path rule: decisions first. Where no decision moved, the gradient
// norm and the masters' step (update_distance) within bf16's rounding through the backward's
// depth; where one did, a moved token's gradient went elsewhere (not a rounding: unbounded by
// it), and no master may part by more than one step's reach (expect_parameters_close).
void expect_bf16_step_tracks_fp32(const SharedStates& states, const SharedStateStep& s,
                                  const TrainingScale& scale, const std::string& family) {
  const std::string at = str_cat(family, " step ", s.state + 1);
  // cross_path.h's rule for one BF16 path against FP32 (a gradient or update of the wrong sign
  // or scale is O(1)); the gradient norm and the masters' step alike.
  const double backward = bf16_backward_bound(scale.depth, 1);
  const StepDifference d =
      expect_step_from_shared_state(states, s, {kBf16LossTolerance, backward, backward}, scale, at);
  std::printf(
      "[ precision ] %s from the FP32 state: |bf16 - fp32| / fp32 = %.2e, gradient norm %.2e, "
      "masters' step %.2e (bound %.2e where no decision moved); routing: %lld token(s) moved\n",
      at.c_str(), d.loss, d.grad_norm, d.update, backward, static_cast<long long>(d.moved));
}

TEST_P(SharedStatePrecisionTest, Bf16StepsFromFp32StatesTrackFp32) {
  const std::string family = GetParam();
  const std::string dir = fresh_dir("precision_states_" + family);
  StatusOr<RunConfig> fp32 = config(family, "FP32", 100), bf16 = config(family, "BF16", 100);
  ASSERT_TRUE(fp32.ok() && bf16.ok()) << fp32.status().to_string() << bf16.status().to_string();
  const SharedStates states = steps_from_shared_states(*fp32, *fp32, *bf16, {10, 40, 70}, dir);
  ASSERT_EQ(states.steps.size(), 3u);
  ASSERT_EQ(states.lead.losses.size(), 71u);
  TrainingScale scale = training_scale(*fp32, 0);
  scale.eps = kBf16Eps;
  for (const SharedStateStep& s : states.steps)
    expect_bf16_step_tracks_fp32(states, s, scale, family);
  fs::remove_all(dir);
}

std::vector<std::string> every_family() {
  std::vector<std::string> all = config_families();
  for (const std::string& f : config_families("modern")) all.push_back(f);
  return all;
}

INSTANTIATE_TEST_SUITE_P(Families, SharedStatePrecisionTest, ::testing::ValuesIn(every_family()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '/', '_');
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A checkpoint stores fp32 masters whatever the precision: BF16 resumes as FP32 (continuing
// exactly where FP32 from the same masters and optimizer state would), and FP32 as BF16.
TEST_F(PrecisionTest, CheckpointsAreFp32AndResumeAcrossPrecisions) {
  const std::string dir = fresh_dir("precision_resume");
  for (const auto& [from, to] :
       std::vector<std::pair<std::string, std::string>>{{"BF16", "FP32"}, {"FP32", "BF16"}}) {
    SCOPED_TRACE(from + " -> " + to);
    const std::string run = dir + "/" + from;
    StatusOr<RunConfig> cfg = config("quickstart", from, 6);
    ASSERT_TRUE(cfg.ok());
    {
      auto t = Trainer::create(*cfg, quiet_options(run, false), nullptr);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      for (int i = 0; i < 3; ++i) step_loss(**t);
      StatusOr<std::string> saved = (*t)->save();
      ASSERT_TRUE(saved.ok()) << saved.status().to_string();
      StatusOr<CheckpointManifestInfo> m = ckpt::read_manifest(*saved);
      ASSERT_TRUE(m.ok());
      EXPECT_EQ(m->dtype, "f32");
    }
    // Resume in the other precision, and in the same one as the reference for the next step.
    StatusOr<RunConfig> other = config("quickstart", to, 6);
    auto resumed = Trainer::create(*other, quiet_options(run, true), nullptr);
    ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
    EXPECT_EQ((*resumed)->steps_done(), 3);
    EXPECT_EQ((*resumed)->model().params().act_dtype(), to == "BF16" ? DType::kBF16 : DType::kF32);
    // The reference resumes from a copy: a run directory belongs to one trainer at a time.
    fs::copy(run, run + "-same", fs::copy_options::recursive);
    auto same = Trainer::create(*cfg, quiet_options(run + "-same", true), nullptr);
    ASSERT_TRUE(same.ok());
    // The masters loaded are the saved ones, bit for bit, in either precision.
    EXPECT_EQ(flat_parameters((*resumed)->model()), flat_parameters((*same)->model()));
    const double l_other = step_loss(**resumed), l_same = step_loss(**same);
    EXPECT_NEAR(l_other, l_same, kBf16LossTolerance * l_same);
    EXPECT_TRUE(std::isfinite(l_other));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe::testing
