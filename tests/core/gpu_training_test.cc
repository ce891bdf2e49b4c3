// The whole model on a GPU against the CPU (label gpu: skips without a device, fails when
// MOMOE_REQUIRE_GPU=1 and none is usable). Every model family in configs/, shrunk to test size
// on a small real corpus as in precision_test:
// - FP32: 20 steps on the GPU and on the CPU from the same initial weights (parameters are drawn
//   on the host, TransformerLM::init_parameters) compare as two paths (tests/testing/
//   cross_path.h, trainer_test_util.h): routing counters first (a token whose top-k choice sits
//   within rounding of a tie may flip; kernels sum in other orders), then each step's loss within
//   float32 epsilon x depth x steps x loss plus each moved token's bounded effect; two GPU runs
//   are bit-identical (the same path); a capacity-mode step synchronises with the host once, and
//   its later steps are replays (train.cuda_graphs is on by default where it applies).
// - BF16 (on the GPU the fused attention, the default for heads of at most 128 columns): 100
//   steps on the GPU repeat bit for bit and learn; their distance from 100 BF16 steps on the
//   CPU is reported. Whole BF16 runs part at near-ties (two OpenBLAS kernels' CPU runs of
//   Qwen3-MoE at this size differ by 1.1-1.5% within 100 steps, Mixtral's by up to 1.3%), so
//   the GPU is checked one step at a time from the CPU run's states (shared_state_steps.h):
//   decisions counted, the loss and gradient norm within kGpuBf16LossTolerance, the masters'
//   step within bf16's derived bound for two paths, each master within one step's reach.
// - BF16 with the other attention paths on the GPU side (MOMOE_ATTENTION=gemm-bf16, which
//   rounds P and dS to bf16 as the fused kernels do, and =gemm, in the compute dtype): the same.
// - Checkpoints: a GPU run's checkpoint resumes on the CPU and a CPU run's on the GPU, with the
//   same masters bit for bit; the tensor files a GPU run writes equal those the CPU writes for
//   the same weights.
// - CUDA graphs (train.cuda_graphs): steps replayed from a recording are bit-identical to eager
//   steps, dropout and SparseMixer's sampling included.
// - Memory: each step records the CUDA allocator's peak, which the memory check's estimate
//   brackets (never below it).
// Each family prints one "[ gpu ]" line with its worst per-step difference (the report).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/checkpoint/checkpoint_io.h"
#include "io/file_util.h"
#include "kernels/attention.h"
#include "proto/run_convert.h"
#include "tests/core/shared_state_steps.h"
#include "tests/core/trainer_test_util.h"
#include "tests/testing/cross_path.h"
#include "tests/testing/cuda_device.h"
#include "tests/testing/scoped_env.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

// A BF16 GPU step against the CPU's from the same state: the loss and the gradient norm within
// 1% (the GPU step issue's requirement; float32's bound does not apply to 8-bit significands,
// and bf16's epsilon x depth exceeds 1). Both are sums over many entries, where independent
// roundings mostly cancel (window of 2026-11-28: at most 4.5e-5 and 9.4e-4). The masters' step
// is an L2 distance over every entry, where they add up: cross_path.h's bf16_backward_bound for
// two BF16 paths (the same window measured 4.5e-4 to 2.6e-2 on every family; 1% was not
// derived).
constexpr double kGpuBf16LossTolerance = 0.01;

struct TrainedRun {
  TrainingRecord record;  // losses and routing counters per step
  TrainingScale scale;
  std::vector<int64_t> syncs;  // host synchronisations per step
  std::vector<double> params;  // final masters
  // train.cuda_graphs: steps replayed from the recording, and why recording failed ("" if not).
  int64_t graph_replays = 0;
  std::string graph_failure;
};

class GpuTrainingTest
    : public SmallCorpusSuite<GpuTrainingTest, ::testing::TestWithParam<std::string>> {
 public:
  void SetUp() override { MOE_REQUIRE_CUDA_DEVICE(); }

  static StatusOr<RunConfig> config(const std::string& family, const std::string& precision,
                                    const std::string& device, int64_t steps,
                                    const std::vector<std::string>& extra = {}) {
    std::vector<std::string> overrides{"train.precision=" + precision, "train.device=" + device};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return small_family_config(family, *corpus_, steps, overrides);
  }

  static TrainedRun train(const std::string& family, const std::string& precision,
                          const std::string& device, const std::string& run_dir, int steps,
                          const std::vector<std::string>& extra = {}) {
    TrainedRun r;
    StatusOr<RunConfig> cfg = config(family, precision, device, steps, extra);
    EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
    if (!cfg.ok()) return r;
    StatusOr<std::unique_ptr<Trainer>> t =
        Trainer::create(*cfg, quiet_options(run_dir, false), nullptr);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return r;
    EXPECT_EQ((*t)->context().device().is_cuda(), device == "CUDA");
    for (int i = 0; i < steps; ++i) {
      const int64_t before = (*t)->context().sync_count();
      StatusOr<StepStatsInfo> s = (*t)->step();
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (!s.ok()) break;
      r.syncs.push_back((*t)->context().sync_count() - before);
      r.record.add(*s);
    }
    r.scale = training_scale(*cfg, (*t)->model().config().vocab_size);
    r.params = flat_parameters((*t)->model());
    if (const StepGraph* g = (*t)->step_graph()) {
      r.graph_replays = g->replays();
      r.graph_failure = g->failure();
    }
    return r;
  }

  static bool dropless(const std::string& family) {
    StatusOr<RunConfig> cfg = config(family, "FP32", "CPU", 1);
    if (!cfg.ok()) return false;
    for (const BlockPlan& b : cfg->model.blocks) {
      if (b.moe && b.moe_cfg.dropless) return true;
    }
    return false;
  }
};

// FP32: cross-path equality (trainer_test_util.h): routing counters compared first, then the
// losses within float32's derived bound (and each flip's bounded effect). BF16: the whole runs'
// distance and decisions reported (they part at near-ties; expect_bf16_steps_from_cpu_states
// checks). Returns the worst relative difference.
double compare_losses(const TrainedRun& a, const TrainedRun& b, bool bf16,
                      const std::string& what) {
  const RoutingDifference d = routing_difference(a.record, b.record);
  double worst = 0;
  if (!bf16) {
    worst = expect_same_training(a.record, b.record, a.scale, what);
  } else {
    EXPECT_EQ(a.record.losses.size(), b.record.losses.size()) << what;
    for (size_t i = 0; i < std::min(a.record.losses.size(), b.record.losses.size()); ++i) {
      const double rel =
          std::fabs(a.record.losses[i] - b.record.losses[i]) / std::fabs(a.record.losses[i]);
      worst = std::max(worst, rel);
    }
  }
  std::printf(
      "[ gpu ] %s: worst per-step |gpu - cpu| / cpu = %.3e over %zu steps; routing: %lld "
      "token(s) moved, first at step %lld\n",
      what.c_str(), worst, a.record.losses.size(), static_cast<long long>(d.moved),
      static_cast<long long>(d.first));
  return worst;
}

// One BF16 step on the GPU (b) against the CPU's (a) from the CPU run's state `s`: the CPU's is
// its run's own next step (the state was shared: masters, optimizer state, batch); near-ties
// that route otherwise are counted and reported; the loss is within kGpuBf16LossTolerance, and
// where no decision moved the gradient norm too and the masters' step (update_distance: what
// the loss, computed before the update, cannot show) within bf16_backward_bound for two BF16
// paths; no master parts by more than one step's reach (expect_parameters_close).
void expect_gpu_step_tracks_cpu(const SharedStates& states, const SharedStateStep& s,
                                const TrainingScale& scale, const std::string& what) {
  const std::string at = str_cat(what, ", step ", s.state + 1, " from the CPU's state");
  const double update = bf16_backward_bound(scale.depth, 2);
  const StepDifference d = expect_step_from_shared_state(
      states, s, {kGpuBf16LossTolerance, kGpuBf16LossTolerance, update}, scale, at);
  std::printf(
      "[ gpu ] %s: |gpu - cpu| / cpu = %.3e, gradient norm %.3e, masters' step %.3e (bound "
      "%.3e); routing: %lld token(s) moved\n",
      at.c_str(), d.loss, d.grad_norm, d.update, update, static_cast<long long>(d.moved));
}

// BF16 on the GPU one step at a time from the CPU's BF16 run's states 25, 50 and 75
// (expect_gpu_step_tracks_cpu).
void expect_bf16_steps_from_cpu_states(const std::string& family, const std::string& dir,
                                       const std::string& what) {
  StatusOr<RunConfig> cpu = GpuTrainingTest::config(family, "BF16", "CPU", 100);
  StatusOr<RunConfig> gpu = GpuTrainingTest::config(family, "BF16", "CUDA", 100);
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << cpu.status().to_string() << gpu.status().to_string();
  const SharedStates states = steps_from_shared_states(*cpu, *cpu, *gpu, {25, 50, 75}, dir);
  ASSERT_EQ(states.steps.size(), 3u) << what;
  TrainingScale scale = training_scale(*cpu, 0);
  scale.eps = kBf16Eps;
  for (const SharedStateStep& s : states.steps) expect_gpu_step_tracks_cpu(states, s, scale, what);
}

// The same training on the CPU, on the GPU, and on the GPU again, in `dir`.
struct ThreeRuns {
  TrainedRun cpu, gpu, again;
};
ThreeRuns cpu_gpu_gpu(const std::string& family, const std::string& precision,
                      const std::string& dir, int steps) {
  return {GpuTrainingTest::train(family, precision, "CPU", dir + "/cpu", steps),
          GpuTrainingTest::train(family, precision, "CUDA", dir + "/gpu", steps),
          GpuTrainingTest::train(family, precision, "CUDA", dir + "/gpu_again", steps)};
}

TEST_P(GpuTrainingTest, Fp32MatchesTheCpuAndRepeatsBitForBit) {
  const std::string family = GetParam();
  const std::string dir = fresh_dir("gpu_fp32_" + family);
  const auto [cpu, gpu, again] = cpu_gpu_gpu(family, "FP32", dir, 20);
  ASSERT_EQ(gpu.record.losses.size(), 20u);
  compare_losses(cpu, gpu, /*bf16=*/false, family + " FP32");
  EXPECT_EQ(gpu.record.losses, again.record.losses) << "two GPU runs differ (bit equality)";
  EXPECT_EQ(gpu.params, again.params) << "two GPU runs end with different weights";
  if (!dropless(family)) {
    for (size_t i = 0; i < gpu.syncs.size(); ++i) {
      EXPECT_EQ(gpu.syncs[i], 1) << "step " << i << ": host synchronisations on the capacity path";
    }
    // train.cuda_graphs is on by default where it applies: these steps were replays.
    EXPECT_EQ(gpu.graph_failure, "") << family;
    EXPECT_GT(gpu.graph_replays, 0) << family << ": no step replayed by default";
  }
  fs::remove_all(dir);
}

TEST_P(GpuTrainingTest, Bf16TracksTheCpuAndRepeatsBitForBit) {
  const std::string family = GetParam();
  const std::string dir = fresh_dir("gpu_bf16_" + family);
  const auto [cpu, gpu, again] = cpu_gpu_gpu(family, "BF16", dir, 100);
  ASSERT_EQ(gpu.record.losses.size(), 100u);
  compare_losses(cpu, gpu, /*bf16=*/true, family + " BF16");
  EXPECT_EQ(gpu.record.losses, again.record.losses) << "two BF16 GPU runs differ (bit equality)";
  EXPECT_LT(gpu.record.losses.back(), gpu.record.losses.front() - 1.0)
      << "BF16 training on the GPU does not learn";
  expect_bf16_steps_from_cpu_states(family, dir + "/states", family + " BF16");
  fs::remove_all(dir);
}

// The same with the attention paths a user picks by name (kernels/attention.h's
// cuda_attention; the fused kernels, the default, run in every BF16 test above): the GEMM path
// on bf16 operands (MOMOE_ATTENTION=gemm-bf16; kernels/cuda/attention_bf16.h) and the one in the
// compute dtype (=gemm); the quick start's family and the modern block (RoPE before
// attention). One CPU run per family serves both.
TEST_F(GpuTrainingTest, Bf16WithEachNamedAttentionPathTracksTheCpu) {
  const std::pair<const char*, kernels::CudaAttention> paths[] = {
      {"gemm-bf16", kernels::CudaAttention::kGemmBf16}, {"gemm", kernels::CudaAttention::kGemm}};
  for (const std::string family : {"quickstart", "modern/mixtral"}) {
    std::string name = family;
    std::replace(name.begin(), name.end(), '/', '_');
    const std::string dir = fresh_dir("gpu_bf16_tc_" + name);
    const TrainedRun cpu = train(family, "BF16", "CPU", dir + "/cpu", 100);
    StatusOr<RunConfig> cfg = config(family, "BF16", "CUDA", 100);
    for (const auto& [path, kind] : paths) {
      const std::string what = family + " BF16, " + path + " attention";
      const ScopedEnv attention("MOMOE_ATTENTION", path);
      if (!cfg.ok()) {
        ADD_FAILURE() << cfg.status().to_string();
        break;
      }
      // The GPU runs do take the path (a head too wide for it would test nothing).
      EXPECT_EQ(kernels::cuda_attention(DType::kBF16, cfg->model.d_model / cfg->model.n_heads),
                kind)
          << what;
      const TrainedRun gpu = train(family, "BF16", "CUDA", dir + "/gpu_" + path, 100);
      const TrainedRun again = train(family, "BF16", "CUDA", dir + "/gpu_again_" + path, 100);
      expect_bf16_steps_from_cpu_states(family, dir + "/states_" + path, what);
      EXPECT_EQ(gpu.record.losses.size(), 100u) << what;
      if (gpu.record.losses.size() != 100u) continue;  // the next path still runs
      compare_losses(cpu, gpu, /*bf16=*/true, what);
      EXPECT_EQ(gpu.record.losses, again.record.losses) << "two GPU runs differ: " << what;
      EXPECT_LT(gpu.record.losses.back(), gpu.record.losses.front() - 1.0) << what;
    }
    fs::remove_all(dir);
  }
}

// train.cuda_graphs (core/train/step_graph.h): the steps after the eager ones are recorded once
// and replayed, with the same losses and weights, bit for bit, as eager steps (the same kernels
// on the same memory; dropout masks and SparseMixer's samples keyed by the step the kernels read
// from device memory), and one sync per step. A replay that did nothing, read a stale batch or
// drew a stale step's masks would change the losses.
TEST_F(GpuTrainingTest, CudaGraphStepsAreBitIdenticalToEagerSteps) {
  constexpr int kSteps = 8;
  // The quick start; SparseMixer (sampled routing); DeepSeek-V3's routing in capacity mode
  // (loss-free balancing's loads accumulate inside the graph, its biases move outside) with two
  // micro-batches a step; Mixtral. Every one with its dropout.
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"quickstart", {}},
      {"sparsemixer", {}},
      {"modern/deepseek-v3",
       {"model.moe.dropless=false", "model.moe.num_experts=8", "model.moe.top_k=4",
        "train.grad_accum=2"}},
      {"modern/mixtral", {}}};
  for (const auto& [family, options] : runs) {
    for (const std::string precision : {"FP32", "BF16"}) {
      const std::string what = family + " " + precision;
      std::string name = family + "_" + precision;
      std::replace(name.begin(), name.end(), '/', '_');
      const std::string dir = fresh_dir("gpu_graphs_" + name);
      std::vector<std::string> extra = options;
      extra.push_back("train.cuda_graphs=false");  // on by default where it applies
      const TrainedRun eager = train(family, precision, "CUDA", dir + "/eager", kSteps, extra);
      EXPECT_EQ(eager.graph_replays, 0) << what;
      extra.back() = "train.cuda_graphs=true";
      const TrainedRun graphs = train(family, precision, "CUDA", dir + "/graphs", kSteps, extra);
      fs::remove_all(dir);
      EXPECT_EQ(graphs.graph_failure, "") << what;
      EXPECT_EQ(graphs.graph_replays, kSteps - StepGraph::kEagerSteps) << what;
      ASSERT_EQ(graphs.record.losses.size(), static_cast<size_t>(kSteps)) << what;
      EXPECT_EQ(graphs.record.losses, eager.record.losses) << what << ": graphs change the losses";
      EXPECT_EQ(graphs.params, eager.params) << what << ": graphs change the weights";
      for (size_t i = 0; i < graphs.syncs.size(); ++i) {
        EXPECT_EQ(graphs.syncs[i], 1) << what << ", step " << i;
      }
      std::printf("[ gpu ] %s: %lld of %d steps replayed from a CUDA graph, bit-identical: %s\n",
                  what.c_str(), static_cast<long long>(graphs.graph_replays), kSteps,
                  graphs.record.losses == eager.record.losses && graphs.params == eager.params
                      ? "yes"
                      : "NO");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, GpuTrainingTest, ::testing::ValuesIn(config_families()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });
// The block of current models (RMSNorm, RoPE, SwiGLU, no biases, pre-norm) at the small size,
// with Mixtral's routing, Qwen2-MoE's (fine-grained experts, a gated shared expert) and Qwen3-MoE's
// (fine-grained experts, each head's q and k normalised).
INSTANTIATE_TEST_SUITE_P(Modern, GpuTrainingTest,
                         ::testing::Values("modern/mixtral", "modern/qwen2-moe",
                                           "modern/qwen3-moe"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '/', '_');
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The tensor files of a checkpoint (safetensors), by name.
std::map<std::string, std::string> tensor_files(const std::string& checkpoint) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(checkpoint)) {
    if (e.path().extension() == ".safetensors") {
      files[e.path().filename().string()] = *io::read_file(e.path().string());
    }
  }
  return files;
}

TEST_F(GpuTrainingTest, CheckpointsMoveBetweenTheGpuAndTheCpu) {
  const std::string dir = fresh_dir("gpu_checkpoints");
  for (const auto& [from, to] :
       std::vector<std::pair<std::string, std::string>>{{"CUDA", "CPU"}, {"CPU", "CUDA"}}) {
    SCOPED_TRACE(from + " -> " + to);
    const std::string run = dir + "/" + from;
    StatusOr<RunConfig> cfg = config("quickstart", "FP32", from, 6);
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    std::map<std::string, std::string> original;  // the checkpoint's tensor files, as written
    {
      auto t = Trainer::create(*cfg, quiet_options(run, false), nullptr);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      for (int i = 0; i < 3; ++i) step_loss(**t);
      StatusOr<std::string> s = (*t)->save();
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      original = tensor_files(*s);
      ASSERT_FALSE(original.empty()) << *s;
    }
    // Resume on the other device, and on the same one as the reference.
    fs::copy(run, run + "-same", fs::copy_options::recursive);
    StatusOr<RunConfig> other = config("quickstart", "FP32", to, 6);
    ASSERT_TRUE(other.ok());
    auto resumed = Trainer::create(*other, quiet_options(run, true), nullptr);
    ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
    auto same = Trainer::create(*cfg, quiet_options(run + "-same", true), nullptr);
    ASSERT_TRUE(same.ok()) << same.status().to_string();
    ASSERT_EQ((*resumed)->steps_done(), 3);
    EXPECT_EQ((*resumed)->context().device().is_cuda(), to == "CUDA");
    EXPECT_EQ(flat_parameters((*resumed)->model()), flat_parameters((*same)->model()))
        << "the masters loaded differ from the ones saved";
    // Saved again from the other device (over the same step), the same weights give the same
    // tensor files.
    StatusOr<std::string> resaved = (*resumed)->save();
    ASSERT_TRUE(resaved.ok()) << resaved.status().to_string();
    EXPECT_TRUE(tensor_files(*resaved) == original)
        << *resaved << " written from " << to << " differs from the files written from " << from;
    // One step on two devices from the same masters: routing counted, then float32's bound.
    TrainingRecord on_other, on_same;
    StatusOr<StepStatsInfo> s_other = (*resumed)->step(), s_same = (*same)->step();
    ASSERT_TRUE(s_other.ok() && s_same.ok());
    on_other.add(*s_other);
    on_same.add(*s_same);
    expect_same_training(on_same, on_other,
                         training_scale(*cfg, (*same)->model().config().vocab_size),
                         "the step after the resume on " + to);
  }
  fs::remove_all(dir);
}

// A run's steps' recorded allocator peaks, the memory check's estimate less cuBLAS's workspace,
// and how many lines of its metrics.jsonl carry a peak; peaks is short where a step failed
// (reported). The run's directory is removed.
struct PeakRecord {
  double estimate = 0;
  std::vector<int64_t> peaks;
  int carried = 0;
};
PeakRecord record_peaks(const RunConfig& cfg, int steps) {
  PeakRecord r;
  const std::string run = fresh_dir("gpu_memory");
  {
    auto t = Trainer::create(cfg, quiet_options(run, false), nullptr);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().to_string();
      fs::remove_all(run);
      return r;
    }
    r.estimate = static_cast<double>((*t)->memory_estimate().total()) -
                 static_cast<double>(Context::kCublasWorkspaceBytes);
    for (int i = 0; i < steps; ++i) {
      StatusOr<StepStatsInfo> st = (*t)->step();
      if (!st.ok()) {
        ADD_FAILURE() << st.status().to_string();
        break;
      }
      r.peaks.push_back(st->peak_tensor_bytes.value_or(-1));
    }
  }
  std::ifstream metrics(run + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"peak_tensor_bytes\":") != std::string::npos) ++r.carried;
  }
  fs::remove_all(run);
  return r;
}

// The memory of a GPU step (the memory-estimate half of the multi-device issue): each step records
// the CUDA pool allocator's peak (a replayed step its recording's), metrics.jsonl carries it on
// every training line, and the estimate the memory check uses brackets it: never below it (the
// check's promise: a run it admits does not run out), at most 1.6 x it (MemoryEstimateTest's
// per-family bracket on the CPU, which also holds the quick start and smoe-medium within 10%).
// cuBLAS's workspace is made with cudaMalloc outside the pool, so it leaves the estimate before
// the comparison. The quick start (capacity mode: its steps 3 and 4 replay a CUDA graph) and
// Mixtral's block (dropless), FP32 and BF16, without and with full recomputation. Ratios printed.
TEST_F(GpuTrainingTest, StepsRecordTheAllocatorsPeakWhichTheEstimateBrackets) {
  constexpr int kSteps = 4;
  for (const std::string family : {"quickstart", "modern/mixtral"}) {
    for (const char* precision : {"FP32", "BF16"}) {
      for (const char* recompute : {"NONE", "FULL"}) {
        const std::string what = str_cat(family, " ", precision, " recompute ", recompute);
        SCOPED_TRACE(what);
        StatusOr<RunConfig> cfg =
            config(family, precision, "CUDA", kSteps,
                   {str_cat("train.recompute=", recompute), "train.log_every=1"});
        if (!cfg.ok()) {
          ADD_FAILURE() << cfg.status().to_string();
          continue;
        }
        const PeakRecord r = record_peaks(*cfg, kSteps);
        EXPECT_EQ(r.peaks.size(), static_cast<size_t>(kSteps));
        EXPECT_EQ(r.carried, static_cast<int>(r.peaks.size()))
            << "training lines of metrics.jsonl with the step's peak";
        for (size_t i = 0; i < r.peaks.size(); ++i) {
          const double peak = static_cast<double>(r.peaks[i]), ratio = r.estimate / peak;
          EXPECT_GT(peak, 0) << "step " << i + 1 << " recorded no allocator peak";
          std::printf("[ gpu ] memory %s step %zu: estimate %.2f MiB, peak %.2f MiB, ratio %.2f\n",
                      what.c_str(), i + 1, r.estimate / 1048576.0, peak / 1048576.0, ratio);
          EXPECT_GE(ratio, 1.0) << "step " << i + 1 << ": the estimate is below the GPU's peak";
          EXPECT_LE(ratio, 1.6) << "step " << i + 1;
        }
      }
    }
  }
}

}  // namespace
}  // namespace moe::testing
