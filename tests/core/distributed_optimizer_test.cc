// The distributed optimizer (train.distributed_optimizer, core/optim/state_sharding.h) on the
// Local backend: for world 2 and 4 at EP 1 and 2 (DP 2 and 4; EP 2 alone, where only the dense
// state is sharded), AdamW and SGD with momentum, FP32 and BF16, with gradient clipping active
// at every step, the sharded optimizer trains the same weights as the replicated one, bit for
// bit, with the same losses and gradient norms: every element's sum, norm and update is the same
// arithmetic in the same order (the Local backend reduces in rank order whether it all-reduces
// or reduce-scatters; the norm adds the same blocks in the same order), so no tolerance applies.
// Each rank keeps only its chunk of the state.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <mutex>

#include "comm/local_communicator.h"
#include "kernels/optimizer.h"
#include "tests/core/trainer_test_util.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

struct Layout {
  int world, ep;
};

struct TrainedRun {
  std::vector<double> losses, grad_norms;             // rank 0's, per step
  std::map<std::string, std::vector<double>> params;  // "<world rank>/<name>": every rank's own
};

class DistributedOptimizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    corpus_ = new std::string(fresh_dir("zero1_corpus"));
    ASSERT_FALSE(write_small_corpus(*corpus_).empty());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*corpus_);
    delete corpus_;
  }

  // The optimizer state of each kind holds this rank's chunk alone: `chunk` elements, R x chunk
  // covering the kind's parameters, and fewer than all of them once they span several blocks.
  static Status check_state_is_sharded(Trainer& t, int world, int ep) {
    const Optimizer& opt = t.optimizer();
    const ParameterSet& params = t.model().params();
    const std::pair<ParamKind, int> kinds[] = {{ParamKind::kDense, world},
                                               {ParamKind::kExpert, world / ep}};
    for (const auto& [kind, ranks] : kinds) {
      const ArenaShard& shard = opt.sharding().of(kind);
      const int64_t numel = params.numel(kind);
      const bool sharded = ranks > 1 && numel > 0;
      if (shard.sharded() != sharded || shard.ranks != (sharded ? ranks : 1) ||
          opt.state(0, kind).numel() != shard.chunk || shard.ranks * shard.chunk < numel ||
          params.masters(kind).numel() != shard.ranks * shard.chunk ||
          (sharded && numel > ranks * kernels::kSquaresBlock && shard.chunk >= numel)) {
        return internal_error("kind ", static_cast<int>(kind), ": ", numel, " parameters, chunk ",
                              shard.chunk, " of ", shard.ranks, " ranks, state ",
                              opt.state(0, kind).numel(), " elements");
      }
    }
    return Status::OK();
  }

  // `steps` steps on a fresh run directory; every rank's own parameters, rank 0's statistics.
  static TrainedRun train(Layout layout, int steps, std::vector<std::string> set,
                          bool distributed) {
    set.push_back(std::string("train.distributed_optimizer=") + (distributed ? "true" : "false"));
    const std::string dir =
        fresh_dir(str_cat("zero1_", layout.world, "_", layout.ep, "_", distributed ? "on" : "off"));
    TrainedRun run;
    std::mutex mu;
    Status s = comm::run_local_ranks(layout.world, [&](comm::Communicator& c) -> Status {
      MOE_ASSIGN_OR_RETURN(RunConfig cfg, tiny_config(*corpus_, "", set, layout.ep));
      MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t,
                           Trainer::create(cfg, quiet_options(dir), &c));
      if (distributed) MOE_RETURN_IF_ERROR(check_state_is_sharded(*t, layout.world, layout.ep));
      for (int i = 0; i < steps; ++i) {
        MOE_ASSIGN_OR_RETURN(StepStatsInfo stats, t->step());
        if (c.rank() != 0) continue;
        std::lock_guard<std::mutex> lock(mu);
        run.losses.push_back(stats.loss);
        run.grad_norms.push_back(stats.grad_norm);
      }
      for (const auto& p : t->model().params().all()) {
        std::vector<double> values = parameter_values(t->model(), *p);
        std::lock_guard<std::mutex> lock(mu);
        run.params[str_cat(c.rank(), "/", p->name)] = std::move(values);
      }
      return Status::OK();
    });
    EXPECT_TRUE(s.ok()) << s.to_string();
    fs::remove_all(dir);
    return run;
  }

  // Both optimizers, `steps` steps each, compared exactly; clipping must have acted every step.
  static void expect_same_weights(Layout layout, const std::vector<std::string>& set, double clip,
                                  const std::string& what) {
    const int steps = 4;
    const TrainedRun replicated = train(layout, steps, set, false);
    const TrainedRun sharded = train(layout, steps, set, true);
    ASSERT_EQ(replicated.losses.size(), static_cast<size_t>(steps)) << what;
    for (int i = 0; i < steps; ++i) {
      EXPECT_GT(replicated.grad_norms[i], clip) << what << ": clipping idle at step " << i;
    }
    EXPECT_EQ(sharded.losses, replicated.losses) << what;
    EXPECT_EQ(sharded.grad_norms, replicated.grad_norms) << what;
    ASSERT_EQ(sharded.params.size(), replicated.params.size()) << what;
    for (const auto& [name, want] : replicated.params) {
      const std::vector<double>& got = sharded.params.at(name);
      ASSERT_EQ(got.size(), want.size()) << what << " " << name;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << what << ": " << name << "[" << i << "] differs";
      }
    }
  }

  static std::string* corpus_;
};
std::string* DistributedOptimizerTest::corpus_ = nullptr;

// Clipping at 0.05 acts at every step (the tiny model's norms are above 0.3), so the norm from
// the shards decides every update.
const std::vector<std::string> kClipped = {"model.moe.dropless=true", "train.probe_every=0",
                                           "train.grad_clip=0.05"};

std::vector<std::string> with(std::vector<std::string> set, const std::vector<std::string>& more) {
  set.insert(set.end(), more.begin(), more.end());
  return set;
}

TEST_F(DistributedOptimizerTest, AdamWAtDpTwoAndEpTwoFp32) {
  expect_same_weights({2, 1}, kClipped, 0.05, "world 2 ep 1 (dp 2), AdamW fp32");
  expect_same_weights({2, 2}, kClipped, 0.05, "world 2 ep 2 (dp 1), AdamW fp32");
}

TEST_F(DistributedOptimizerTest, AdamWAtEpTwoByDpTwoBf16) {
  expect_same_weights({4, 2}, with(kClipped, {"train.precision=BF16"}), 0.05,
                      "world 4 ep 2 (dp 2), AdamW bf16");
}

// A larger vocabulary spreads the dense parameters over every rank's chunk (with a parameter
// across each chunk boundary); weight decay on the matrices.
TEST_F(DistributedOptimizerTest, SgdWithMomentumAtDpFourFp32AndBf16) {
  const std::vector<std::string> sgd =
      with(kClipped,
           {"train.optimizer.kind=SGD", "train.optimizer.lr=0.1", "train.optimizer.momentum=0.9",
            "train.optimizer.weight_decay=0.01", "data.vocab_max_size=5000"});
  expect_same_weights({4, 1}, sgd, 0.05, "world 4 ep 1 (dp 4), SGD fp32");
  expect_same_weights({4, 1}, with(sgd, {"train.precision=BF16"}), 0.05,
                      "world 4 ep 1 (dp 4), SGD bf16");
}

TEST_F(DistributedOptimizerTest, AdamWWithWeightDecayAtDpFour) {
  expect_same_weights(
      {4, 1}, with(kClipped, {"train.optimizer.weight_decay=0.1", "data.vocab_max_size=5000"}),
      0.05, "world 4 ep 1 (dp 4), AdamW fp32");
}

}  // namespace
}  // namespace moe::testing
