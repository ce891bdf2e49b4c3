// core/train/step_graph.h on the CPU: which runs may replay their steps as a CUDA graph (and the
// reason named for those that may not), the recorder's eager steps and its fallback when a
// recording fails (the host has no graphs: every call still runs the work, once), and
// train.cuda_graphs as a no-op on the CPU. The recording and replay themselves are GPU tests
// (gpu_training_test, stream_graph_test).
#include "core/train/step_graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "tests/core/trainer_test_util.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

class StepGraphTest : public SmallCorpusSuite<StepGraphTest> {
 public:
  static RunConfig config(const std::string& family, const std::vector<std::string>& extra) {
    StatusOr<RunConfig> cfg = small_family_config(family, *corpus_, 4, extra);
    EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
    return cfg.ok() ? *cfg : RunConfig{};
  }
};

// DeepSeek-V3's routing at the test size in capacity mode, two micro-batches a step.
const std::vector<std::string> kDeepSeekCapacity = {"model.moe.dropless=false",
                                                    "model.moe.num_experts=8", "model.moe.top_k=4",
                                                    "train.grad_accum=2"};

bool mentions(const std::string& reason, const std::string& what) {
  return reason.find(what) != std::string::npos;
}

TEST_F(StepGraphTest, RefusalsNameWhatStandsInTheWay) {
  const Device gpu = Device::cuda(0);  // the verdict reads the device's kind only
  // Random draws do not stand in the way (their step is read on the device), nor SparseMixer.
  RunConfig cfg = config("quickstart", {});
  ASSERT_GT(cfg.model.dropout, 0);
  EXPECT_EQ(step_graph_refusal(cfg, gpu, 1, false), "");
  EXPECT_EQ(step_graph_refusal(config("sparsemixer", {}), gpu, 1, false), "");
  // The GPU test's other runs (gpu_training_test) qualify too.
  EXPECT_EQ(step_graph_refusal(config("modern/mixtral", {}), gpu, 1, false), "");
  EXPECT_EQ(step_graph_refusal(config("modern/deepseek-v3", kDeepSeekCapacity), gpu, 1, false), "");
  EXPECT_TRUE(mentions(step_graph_refusal(cfg, Device::host(), 1, false), "GPU"));
  EXPECT_TRUE(mentions(step_graph_refusal(cfg, gpu, 2, false), "2 ranks"));
  EXPECT_TRUE(mentions(step_graph_refusal(cfg, gpu, 1, true), "host memory"));
  int moe = -1;
  for (size_t b = 0; b < cfg.model.blocks.size() && moe < 0; ++b) {
    if (cfg.model.blocks[b].moe) moe = static_cast<int>(b);
  }
  ASSERT_GE(moe, 0);
  RunConfig dropless = cfg;
  dropless.model.blocks[moe].moe_cfg.dropless = true;
  EXPECT_TRUE(mentions(step_graph_refusal(dropless, gpu, 1, false), "dropless"));
  EXPECT_TRUE(
      mentions(step_graph_refusal(dropless, gpu, 1, false), "block " + std::to_string(moe)));
}

TEST_F(StepGraphTest, EagerStepsThenAFailedRecordingRunsEveryStepEagerlyOnce) {
  std::unique_ptr<Context> ctx = Context::host();
  StepGraph g;
  int ran = 0;
  const auto work = [&] {
    ++ran;
    return Status::OK();
  };
  for (int64_t i = 0; i < StepGraph::kEagerSteps; ++i) {
    EXPECT_TRUE(g.runs_eagerly({1.0}));
    ASSERT_TRUE(g.run(*ctx, {1.0}, work).ok());
  }
  EXPECT_EQ(ran, StepGraph::kEagerSteps);
  EXPECT_FALSE(g.runs_eagerly({1.0})) << "the next step is recorded";
  // The host has no graphs: the recording fails, the step runs eagerly, and so do later ones.
  ASSERT_TRUE(g.run(*ctx, {1.0}, work).ok());
  EXPECT_EQ(ran, StepGraph::kEagerSteps + 1);
  EXPECT_TRUE(mentions(g.failure(), "CUDA graphs")) << g.failure();
  EXPECT_TRUE(g.runs_eagerly({1.0}));
  ASSERT_TRUE(g.run(*ctx, {1.0}, work).ok());
  EXPECT_EQ(ran, StepGraph::kEagerSteps + 2);
  EXPECT_EQ(g.replays(), 0);
  EXPECT_EQ(g.eager_steps(), StepGraph::kEagerSteps + 2);
  EXPECT_EQ(g.nodes(), 0);
  // An error of the work itself comes back.
  EXPECT_EQ(g.run(*ctx, {1.0}, [] { return internal_error("boom"); }).code(),
            StatusCode::kInternal);
}

// The option (on by default) is a silent no-op on the CPU: the same bits with and without, on the
// GPU test's DeepSeek-V3 run (two micro-batches a step, each staged before its forward).
TEST_F(StepGraphTest, OnTheCpuTheOptionChangesNothing) {
  const std::string dir = fresh_dir("step_graph_cpu");
  std::vector<std::vector<double>> losses(2), params(2);
  for (int graphs = 0; graphs < 2; ++graphs) {
    std::vector<std::string> extra = kDeepSeekCapacity;
    if (!graphs) extra.push_back("train.cuda_graphs=false");
    const RunConfig cfg = config("modern/deepseek-v3", extra);
    ASSERT_EQ(cfg.train.cuda_graphs, graphs == 1) << "on by default";
    ::testing::internal::CaptureStderr();
    auto t =
        Trainer::create(cfg, quiet_options(dir + "/" + std::to_string(graphs), false), nullptr);
    const std::string said = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ((*t)->step_graph(), nullptr) << "no graphs on the CPU";
    // On or off, the CPU says nothing of it (a GPU run it does not apply to says why).
    EXPECT_EQ(said.find("cuda_graphs"), std::string::npos) << said;
    for (int i = 0; i < 4; ++i) losses[graphs].push_back(step_loss(**t));
    params[graphs] = flat_parameters((*t)->model());
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(params[0], params[1]);
  EXPECT_TRUE(std::isfinite(losses[0].back()));
  fs::remove_all(dir);
}

// Every training step keys its random draws with the step in device memory (what a recorded
// step needs): the trainer's staged step and first sequence give the same losses and weights,
// bit for bit, as the step kept on the host (TrainerOptions::host_step_keys), with every random
// site on (embedding, attention, residual, FFN, expert and output dropout; SparseMixer's
// samples) and two micro-batches a step.
TEST_F(StepGraphTest, TheStepInDeviceMemoryTrainsLikeTheStepOnTheHost) {
  const std::string dir = fresh_dir("step_graph_keys");
  for (const std::string family : {"quickstart", "sparsemixer"}) {
    SCOPED_TRACE(family);
    const RunConfig cfg =
        config(family, {"model.attention_dropout=0.1", "model.moe.expert_dropout=0.1",
                        "model.moe.output_dropout=0.1", "train.grad_accum=2"});
    std::vector<std::vector<double>> losses(2), params(2);
    for (int host = 0; host < 2; ++host) {
      TrainerOptions opts = quiet_options(dir + "/" + family + std::to_string(host), false);
      opts.host_step_keys = host == 1;
      auto t = Trainer::create(cfg, opts, nullptr);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      for (int i = 0; i < 4; ++i) losses[host].push_back(step_loss(**t));
      params[host] = flat_parameters((*t)->model());
    }
    EXPECT_EQ(losses[0], losses[1]);
    EXPECT_EQ(params[0], params[1]);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe::testing
