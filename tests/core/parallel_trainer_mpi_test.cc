// The training loop under mpirun with the MPI backend: the job's EP layout (EP = world size, and
// EP 2 x DP 2 at four ranks) trains like one process. Rank 0 reruns the same steps alone and
// compares losses and dense parameters (tolerances as in parallel_trainer_test.cc). The
// distributed optimizer trains the replicated optimizer's weights bit for bit, and its
// checkpoints resume with or without it, at another layout (under BF16, with sharded masters,
// too).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "comm/mpi_communicator.h"
#include "tests/core/trainer_test_util.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

const std::vector<std::string> kEquivalent = {"model.moe.dropless=true", "train.probe_every=0"};

std::unique_ptr<comm::Communicator> world() {
  StatusOr<std::unique_ptr<comm::Communicator>> w = comm::MpiCommunicator::create_world({});
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  return std::move(w).value();
}

// rank 0 picks the directory; every rank learns it.
std::string shared_dir(comm::Communicator& w, const std::string& name) {
  std::string dir = w.rank() == 0 ? fresh_dir(name) : std::string();
  return *w.broadcast_bytes(dir, 0);
}

void compare_with_single_process(int ep) {
  auto w = world();
  const std::string corpus = shared_dir(*w, "mpi_corpus");
  if (w->rank() == 0) {
    ASSERT_FALSE(write_small_corpus(corpus).empty());
  }
  ASSERT_TRUE(w->barrier().ok());
  const std::string run = shared_dir(*w, "mpi_run_ep" + std::to_string(ep));
  StatusOr<RunConfig> cfg = tiny_config(corpus, "", kEquivalent, ep);
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(*cfg, quiet_options(run), w.get());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  TrainingRecord parallel, single_record;  // aggregated on rank 0
  for (int i = 0; i < 10; ++i) {
    StatusOr<StepStatsInfo> s = (*t)->step();
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    parallel.add(*s);
  }
  if (w->rank() == 0) {
    StatusOr<RunConfig> single_cfg = tiny_config(corpus, "", kEquivalent, 1);
    StatusOr<std::unique_ptr<Trainer>> single =
        Trainer::create(*single_cfg, quiet_options(fresh_dir("mpi_single")), nullptr);
    ASSERT_TRUE(single.ok()) << single.status().to_string();
    for (int i = 0; i < 10; ++i) {
      StatusOr<StepStatsInfo> s = (*single)->step();
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      single_record.add(*s);
    }
    // Cross-path equality (trainer_test_util.h): decisions counted, then derived bounds.
    const std::string what = "ep " + std::to_string(ep);
    const TrainingScale scale = training_scale(*single_cfg, (*single)->model().config().vocab_size);
    expect_same_training(single_record, parallel, scale, what);
    const RoutingDifference routing = routing_difference(single_record, parallel);
    const auto& a = (*t)->model().params().all();
    const auto& b = (*single)->model().params().all();
    for (size_t p = 0; p < a.size(); ++p) {
      if (a[p]->kind != ParamKind::kDense) continue;
      expect_parameters_close(parameter_values((*t)->model(), *a[p]),
                              parameter_values((*single)->model(), *b[p]), routing, scale, 10,
                              what + " " + a[p]->name);
    }
  }
  ASSERT_TRUE(w->barrier().ok());
}

// A run on every rank of the job: `steps` steps at EP `ep` in run_dir (resumed when it holds a
// checkpoint), saved at the end when asked. Each rank's own record and parameters.
struct MpiRun {
  TrainingRecord record;                    // rank 0's aggregated, the others' own
  std::vector<std::vector<double>> params;  // this rank's, in registration order
  int64_t vocab = 0;
};

MpiRun train_on_every_rank(comm::Communicator& w, const std::string& corpus,
                           const std::string& run_dir, int ep, int steps,
                           const std::vector<std::string>& set, bool save = false) {
  MpiRun run;
  StatusOr<RunConfig> cfg = tiny_config(corpus, "", set, ep);
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  if (!cfg.ok()) return run;
  StatusOr<std::unique_ptr<Trainer>> t = Trainer::create(*cfg, quiet_options(run_dir), &w);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (!t.ok()) return run;
  for (int i = 0; i < steps; ++i) {
    StatusOr<StepStatsInfo> s = (*t)->step();
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (!s.ok()) return run;
    run.record.add(*s);
  }
  if (save) {
    EXPECT_TRUE((*t)->save().ok());
  }
  run.vocab = (*t)->model().config().vocab_size;
  run.params = trainer_masters(**t);  // collective: sharded masters are gathered
  return run;
}

void expect_identical(const MpiRun& a, const MpiRun& b, int rank, const std::string& what) {
  EXPECT_EQ(a.record.losses, b.record.losses) << what << " (rank " << rank << ")";
  EXPECT_EQ(a.record.grad_norms, b.record.grad_norms) << what << " (rank " << rank << ")";
  EXPECT_TRUE(a.params == b.params) << what << ": rank " << rank << "'s weights differ";
}

// 3 steps at EP `ep_a` with `set_a`, saved, then 3 more resumed in the same run directory at
// EP = world with `set_b`: the joined record and the final weights.
MpiRun resumed_run(comm::Communicator& w, const std::string& corpus, const std::string& name,
                   int ep_a, const std::vector<std::string>& set_a,
                   const std::vector<std::string>& set_b) {
  const std::string dir = shared_dir(w, name);
  MpiRun first = train_on_every_rank(w, corpus, dir, ep_a, 3, set_a, /*save=*/true);
  MpiRun second = train_on_every_rank(w, corpus, dir, w.world_size(), 3, set_b);
  first.record.append(second.record);
  second.record = first.record;
  return second;
}

// The distributed optimizer on MPI, whose reduce-scatter sums in its all-reduce's rank order
// (comm/communicator.h): at EP = world (the dense state sharded), DP = world and, at four
// ranks, EP 2 x DP 2, every rank's weights, the losses and the gradient norms are the replicated
// optimizer's bit for bit with clipping active at every step, for AdamW in FP32 and SGD with
// momentum in BF16.
TEST(ParallelTrainerMpiTest, DistributedOptimizerTrainsTheReplicatedWeightsBitForBit) {
  auto w = world();
  const std::string corpus = shared_dir(*w, "mpi_zero_corpus");
  if (w->rank() == 0) {
    ASSERT_FALSE(write_small_corpus(corpus).empty());
  }
  ASSERT_TRUE(w->barrier().ok());
  std::vector<std::pair<int, std::vector<std::string>>> cases = {
      {w->world_size(), {}},
      {1,
       {"train.optimizer.kind=SGD", "train.optimizer.lr=0.1", "train.optimizer.momentum=0.9",
        "train.precision=BF16"}}};
  if (w->world_size() == 4) cases.push_back({2, {}});
  for (auto& [ep, extra] : cases) {
    std::vector<std::string> set = kEquivalent;
    set.push_back("train.grad_clip=0.05");  // the tiny model's norms are above 0.3
    set.insert(set.end(), extra.begin(), extra.end());
    const std::string what =
        str_cat("ep ", ep, " of ", w->world_size(), extra.empty() ? "" : " SGD bf16");
    const MpiRun replicated =
        train_on_every_rank(*w, corpus, shared_dir(*w, "mpi_zero_off"), ep, 4, set);
    set.push_back("train.distributed_optimizer=true");
    const MpiRun sharded =
        train_on_every_rank(*w, corpus, shared_dir(*w, "mpi_zero_on"), ep, 4, set);
    ASSERT_EQ(replicated.record.grad_norms.size(), 4u) << what;
    for (double norm : replicated.record.grad_norms) {
      EXPECT_GT(norm, 0.05) << what;
    }
    expect_identical(replicated, sharded, w->rank(), what);
  }
  ASSERT_TRUE(w->barrier().ok());
}

// Its checkpoints on MPI: saved with the option, resumed without it on the same layout, the run
// is the straight one bit for bit (and off -> on too); saved at DP = world, resumed at EP = world
// (DP 1) with it, the same training within the cross-path bounds.
TEST(ParallelTrainerMpiTest, DistributedOptimizerCheckpointsResumeWithOrWithoutIt) {
  auto w = world();
  const int n = w->world_size();
  const std::string corpus = shared_dir(*w, "mpi_zero_ckpt_corpus");
  if (w->rank() == 0) {
    ASSERT_FALSE(write_small_corpus(corpus).empty());
  }
  ASSERT_TRUE(w->barrier().ok());
  std::vector<std::string> on = kEquivalent;
  on.push_back("train.distributed_optimizer=true");
  const std::vector<std::string>& off = kEquivalent;
  const MpiRun straight =
      train_on_every_rank(*w, corpus, shared_dir(*w, "mpi_zero_straight"), n, 6, off);
  expect_identical(straight, resumed_run(*w, corpus, "mpi_zero_on_off", n, on, off), w->rank(),
                   "distributed optimizer on -> off");
  expect_identical(straight, resumed_run(*w, corpus, "mpi_zero_off_on", n, off, on), w->rank(),
                   "distributed optimizer off -> on");
  const MpiRun resharded = resumed_run(*w, corpus, "mpi_zero_dp", 1, on, on);
  if (w->rank() == 0) {
    StatusOr<RunConfig> cfg = tiny_config(corpus, "", kEquivalent, n);
    ASSERT_TRUE(cfg.ok());
    const TrainingScale scale = training_scale(*cfg, straight.vocab);
    const std::string what =
        "distributed optimizer at DP " + std::to_string(n) + " resumed at EP " + std::to_string(n);
    expect_same_training(straight.record, resharded.record, scale, what);
    const RoutingDifference routing = routing_difference(straight.record, resharded.record);
    for (size_t p = 0; p < straight.params.size(); ++p) {
      expect_parameters_close(straight.params[p], resharded.params[p], routing, scale, 6,
                              what + " parameter " + std::to_string(p));
    }
  }
  ASSERT_TRUE(w->barrier().ok());
}

// Under BF16 the option shards the fp32 masters too; the checkpoints hold them whole: on -> off
// and off -> on at EP = world (the dense masters sharded over the world), bit for bit.
TEST(ParallelTrainerMpiTest, DistributedOptimizerBf16MastersResumeWithOrWithoutIt) {
  auto w = world();
  const int n = w->world_size();
  const std::string corpus = shared_dir(*w, "mpi_zero_bf16_corpus");
  if (w->rank() == 0) {
    ASSERT_FALSE(write_small_corpus(corpus).empty());
  }
  ASSERT_TRUE(w->barrier().ok());
  std::vector<std::string> off = kEquivalent;
  off.push_back("train.precision=BF16");
  std::vector<std::string> on = off;
  on.push_back("train.distributed_optimizer=true");
  const MpiRun straight =
      train_on_every_rank(*w, corpus, shared_dir(*w, "mpi_zero_bf16_straight"), n, 6, off);
  expect_identical(straight, resumed_run(*w, corpus, "mpi_zero_bf16_on_off", n, on, off), w->rank(),
                   "BF16 distributed optimizer on -> off");
  expect_identical(straight, resumed_run(*w, corpus, "mpi_zero_bf16_off_on", n, off, on), w->rank(),
                   "BF16 distributed optimizer off -> on");
  ASSERT_TRUE(w->barrier().ok());
}

TEST(ParallelTrainerMpiTest, ExpertParallelOverEveryRank) {
  auto w = world();
  compare_with_single_process(w->world_size());
}

TEST(ParallelTrainerMpiTest, TwoByTwoAtFourRanks) {
  auto w = world();
  if (w->world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  compare_with_single_process(2);
}

}  // namespace
}  // namespace moe::testing
