// The training loop under mpirun with the MPI backend: the job's EP layout (EP = world size, and
// EP 2 x DP 2 at four ranks) trains like one process. Rank 0 reruns the same steps alone and
// compares losses and dense parameters (tolerances as in parallel_trainer_test.cc).
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
