// The CPU backend's threads do not change the numbers (base/thread_pool.h): every model
// family in configs/ (shrunk to test size), in FP32 and BF16, trains 20 steps at 1, 2 and 3
// threads per rank with bit-identical losses and parameters. The contexts cut work as finely as
// they can (ContextOptions::fine_grained_parallelism), so these small shapes take the threaded
// paths of every kernel: rows, heads, expert blocks, column sums and GEMM tiles. A 2-rank expert-
// parallel run (ranks as threads) is checked the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "comm/local_communicator.h"
#include "proto/run_convert.h"
#include "tests/core/trainer_test_util.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

constexpr int kSteps = 20;

struct RunResult {
  std::vector<double> losses;
  std::vector<double> params;  // every master (widened), in parameter order
};

class ThreadInvarianceTest
    : public SmallCorpusSuite<ThreadInvarianceTest, ::testing::TestWithParam<std::string>> {
 protected:
  static StatusOr<RunConfig> config(const std::string& family, const std::string& precision,
                                    int threads, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> o = {"model.d_model=32",
                                  "model.n_heads=2",
                                  "model.seq_len=16",
                                  "model.d_ff=48",
                                  "model.moe.d_expert=32",
                                  "model.moe.num_experts=4",
                                  "train.batch_size=8",
                                  "train.steps=" + std::to_string(kSteps),
                                  "train.eval_every=0",
                                  "train.checkpoint_every=0",
                                  "train.probe_every=5",
                                  "train.schedule.warmup_steps=5",
                                  "train.precision=" + precision,
                                  "parallel.threads=" + std::to_string(threads),
                                  "data.train=" + *corpus_ + "/train.txt",
                                  "data.valid=" + *corpus_ + "/valid.txt",
                                  "data.test=" + *corpus_ + "/test.txt",
                                  "data.vocab_max_size=1500"};
    o.insert(o.end(), extra.begin(), extra.end());
    return load_run_config(family_config_path(family), o, 0);
  }

  static TrainerOptions options(const std::string& run_dir) {
    TrainerOptions o = quiet_options(run_dir, false);
    o.context.fine_grained_parallelism = true;
    return o;
  }

  static RunResult train(const std::string& family, const std::string& precision, int threads,
                         const std::string& run_dir) {
    RunResult r;
    StatusOr<RunConfig> cfg = config(family, precision, threads);
    EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
    if (!cfg.ok()) return r;
    StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(*cfg, options(run_dir), nullptr);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return r;
    EXPECT_EQ((*t)->context().threads(), threads);
    for (int i = 0; i < kSteps; ++i) r.losses.push_back(step_loss(**t));
    r.params = flat_parameters((*t)->model());
    return r;
  }
};

// Bitwise, so -0.0 vs 0.0 or two NaN payloads would count as different too.
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST_P(ThreadInvarianceTest, OneTwoAndThreeThreadsGiveTheSameBits) {
  const std::string family = GetParam();
  for (const std::string precision : {"FP32", "BF16"}) {
    SCOPED_TRACE(family + " " + precision);
    const std::string dir = fresh_dir("threads_" + family + "_" + precision);
    const RunResult one = train(family, precision, 1, dir + "/t1");
    ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
    ASSERT_FALSE(one.params.empty());
    EXPECT_LT(one.losses.back(), one.losses.front()) << "the run does not learn";
    for (int threads : {2, 3}) {
      const RunResult r = train(family, precision, threads, dir + "/t" + std::to_string(threads));
      EXPECT_EQ(r.losses, one.losses) << threads << " threads: losses differ from 1 thread";
      EXPECT_TRUE(same_bits(r.params, one.params))
          << threads << " threads: parameters differ from 1 thread";
    }
    fs::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, ThreadInvarianceTest, ::testing::ValuesIn(config_families()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });
// The block of current models (RMSNorm, RoPE, SwiGLU, no biases, pre-norm) at the small size.
INSTANTIATE_TEST_SUITE_P(Modern, ThreadInvarianceTest, ::testing::Values("modern/mixtral"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '/', '_');
                           return name;
                         });

// Expert parallelism over two ranks (threads of this process, the Local backend) at 1 and 2
// threads per rank, in capacity and dropless mode: the same losses, bit for bit.
TEST_F(ThreadInvarianceTest, ExpertParallelRanksGiveTheSameBitsAtAnyThreadCount) {
  for (const std::string mode : {"model.moe.dropless=false", "model.moe.dropless=true"}) {
    SCOPED_TRACE(mode);
    std::vector<std::vector<double>> losses_by_threads;
    for (int threads : {1, 2}) {
      const std::string dir = fresh_dir("threads_ep_" + std::to_string(threads));
      std::vector<std::vector<double>> per_rank(2);
      const Status s = comm::run_local_ranks(2, [&](comm::Communicator& world) -> Status {
        MOE_ASSIGN_OR_RETURN(RunConfig cfg,
                             config("momentum", "FP32", threads, {"parallel.ep=2", mode}));
        MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t,
                             Trainer::create(cfg, options(dir), &world));
        for (int i = 0; i < kSteps; ++i) {
          MOE_ASSIGN_OR_RETURN(StepStatsInfo st, t->step());
          per_rank[world.rank()].push_back(st.loss);
        }
        return Status::OK();
      });
      ASSERT_TRUE(s.ok()) << s.to_string();
      // Each rank's loss is that of its own tokens: both ranks are compared.
      losses_by_threads.push_back(per_rank[0]);
      losses_by_threads.back().insert(losses_by_threads.back().end(), per_rank[1].begin(),
                                      per_rank[1].end());
      fs::remove_all(dir);
    }
    ASSERT_EQ(losses_by_threads[0].size(), static_cast<size_t>(2 * kSteps));
    EXPECT_EQ(losses_by_threads[1], losses_by_threads[0]);
  }
}

}  // namespace
}  // namespace moe::testing
