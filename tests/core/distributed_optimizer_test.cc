// The distributed optimizer (train.distributed_optimizer, core/optim/state_sharding.h) on the
// Local backend: for world 2 and 4 at EP 1 and 2 (DP 2 and 4; EP 2 alone, where only the dense
// state is sharded), AdamW and SGD with momentum, FP32 and BF16, with gradient clipping active
// at every step, the sharded optimizer trains the same weights as the replicated one, bit for
// bit, with the same losses and gradient norms: every element's sum, norm and update is the same
// arithmetic in the same order (the Local backend reduces in rank order whether it all-reduces
// or reduce-scatters; the norm adds the same blocks in the same order), so no tolerance applies.
// Each rank keeps only its chunk of the state and, under BF16, of the fp32 masters; the values
// the layers compute with (bf16 working copies, fp32 norms and biases) are the same bits too.
// Where a backend's reduce-scatter would sum in another order (NCCL beyond 2 ranks), the
// gradients are all-reduced whole instead.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>

#include "comm/local_communicator.h"
#include "core/optim/state_sharding.h"
#include "core/train/grad_sync.h"
#include "kernels/optimizer.h"
#include "tests/core/trainer_test_util.h"
#include "tests/testing/gradient_check.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

struct Layout {
  int world, ep;
};

struct TrainedRun {
  std::vector<double> losses, grad_norms;             // rank 0's, per step
  std::map<std::string, std::vector<double>> params;  // "<world rank>/<name>": every rank's own
  std::map<std::string, std::vector<double>> values;  // the same parameters' values (bf16 widened)
  int64_t masters_bytes = 0;                          // rank 0's masters arenas
  int64_t parameter_bytes = 0;                        // rank 0's ParameterSet::parameter_bytes
};

class DistributedOptimizerTest : public SmallCorpusSuite<DistributedOptimizerTest> {
 protected:
  // The optimizer state of each kind holds this rank's chunk alone: `chunk` elements, R x chunk
  // covering the kind's parameters, and fewer than all of them once they span several blocks.
  // Under BF16 so do the fp32 masters of a sharded kind (the chunk [begin, end) of the arena's
  // layout; no parameter keeps a master view); under FP32 they stay whole.
  static Status check_state_is_sharded(Trainer& t, int world, int ep) {
    const Optimizer& opt = t.optimizer();
    const ParameterSet& params = t.model().params();
    const bool bf16 = params.act_dtype() == DType::kBF16;
    const std::pair<ParamKind, int> kinds[] = {{ParamKind::kDense, world},
                                               {ParamKind::kExpert, world / ep}};
    for (const auto& [kind, ranks] : kinds) {
      const ArenaShard& shard = opt.sharding().of(kind);
      const int64_t numel = params.numel(kind);
      const bool sharded = ranks > 1 && numel > 0;
      const bool masters_sharded = sharded && bf16;
      const int64_t masters = masters_sharded ? shard.chunk : shard.ranks * shard.chunk;
      if (shard.sharded() != sharded || shard.ranks != (sharded ? ranks : 1) ||
          opt.state(0, kind).numel() != shard.chunk || shard.ranks * shard.chunk < numel ||
          params.masters_sharded(kind) != masters_sharded ||
          params.masters(kind).nbytes() != static_cast<size_t>(masters) * sizeof(float) ||
          params.masters_begin(kind) != (masters_sharded ? shard.begin() : 0) ||
          (sharded && numel > ranks * kernels::kSquaresBlock && shard.chunk >= numel)) {
        return internal_error("kind ", static_cast<int>(kind), ": ", numel, " parameters, chunk ",
                              shard.chunk, " of ", shard.ranks, " ranks, state ",
                              opt.state(0, kind).numel(), " elements, masters ",
                              params.masters(kind).numel(), " elements from ",
                              params.masters_begin(kind));
      }
      for (const auto& p : params.all()) {
        if (p->kind == kind && (p->master.numel() == 0) != masters_sharded) {
          return internal_error(p->name, ": master ", p->master.to_string());
        }
      }
    }
    return Status::OK();
  }

  // What a checkpoint gathers (Optimizer::GatherTo::kFirstRank): a sharded kind's state and
  // sharded masters land on its group's first rank equal to what every rank gathers, and on no
  // other rank (an empty tensor: no whole arena held there). Collective.
  static Status check_gather_to_first_rank(Trainer& t) {
    using GatherTo = Optimizer::GatherTo;
    const Optimizer& opt = t.optimizer();
    auto same = [](const ArenaShard& shard, const Tensor& every, const Tensor& first,
                   const char* what) -> Status {
      const bool ok = shard.rank == 0 ? bitwise_equal(every, first) : first.numel() == 0;
      if (ok) return Status::OK();
      return internal_error(what, " gathered to the first rank: ", first.view().to_string(),
                            " on group rank ", shard.rank, ", every rank's ",
                            every.view().to_string());
    };
    for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
      const ArenaShard& shard = opt.sharding().of(kind);
      if (!shard.sharded()) continue;
      for (int slot = 0; slot < opt.slots(); ++slot) {
        MOE_ASSIGN_OR_RETURN(Tensor every, opt.whole_state(slot, kind));
        MOE_ASSIGN_OR_RETURN(Tensor first, opt.whole_state(slot, kind, GatherTo::kFirstRank));
        MOE_RETURN_IF_ERROR(same(shard, every, first, "optimizer state"));
      }
      if (!t.model().params().masters_sharded(kind)) continue;
      MOE_ASSIGN_OR_RETURN(Tensor every, opt.whole_masters(kind));
      MOE_ASSIGN_OR_RETURN(Tensor first, opt.whole_masters(kind, GatherTo::kFirstRank));
      MOE_RETURN_IF_ERROR(same(shard, every, first, "masters"));
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
      if (distributed) MOE_RETURN_IF_ERROR(check_gather_to_first_rank(*t));
      const ParameterSet& params = t->model().params();
      std::vector<std::vector<double>> masters = trainer_masters(*t);  // collective
      std::lock_guard<std::mutex> lock(mu);
      for (size_t i = 0; i < params.all().size(); ++i) {
        const Parameter& p = *params.all()[i];
        run.params[str_cat(c.rank(), "/", p.name)] = std::move(masters[i]);
        run.values[str_cat(c.rank(), "/", p.name)] = parameter_working_values(t->model(), p);
      }
      if (c.rank() == 0) {
        run.parameter_bytes = params.parameter_bytes();
        for (ParamKind kind : {ParamKind::kDense, ParamKind::kExpert}) {
          run.masters_bytes += static_cast<int64_t>(params.masters(kind).nbytes());
        }
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
    using Values = std::map<std::string, std::vector<double>> TrainedRun::*;
    for (Values field : {&TrainedRun::params, &TrainedRun::values}) {
      const char* which = field == &TrainedRun::params ? "master" : "value";
      ASSERT_EQ((sharded.*field).size(), (replicated.*field).size()) << what;
      for (const auto& [name, want] : replicated.*field) {
        const std::vector<double>& got = (sharded.*field).at(name);
        ASSERT_EQ(got.size(), want.size()) << what << " " << name;
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(got[i], want[i])
              << what << ": " << which << " " << name << "[" << i << "] differs";
        }
      }
    }
    std::printf("%s: masters %lld bytes on rank 0 (replicated: %lld), parameters %lld (%lld)\n",
                what.c_str(), static_cast<long long>(sharded.masters_bytes),
                static_cast<long long>(replicated.masters_bytes),
                static_cast<long long>(sharded.parameter_bytes),
                static_cast<long long>(replicated.parameter_bytes));
    // Under BF16 the masters shrink to a chunk per kind (check_state_is_sharded: exactly), which
    // saves memory once they span more than a block per rank (a chunk is at least one).
    const int64_t blocks = int64_t{layout.world} * kernels::kSquaresBlock * 4;
    if (what.find("bf16") != std::string::npos && replicated.masters_bytes > blocks) {
      EXPECT_LT(sharded.masters_bytes, replicated.masters_bytes) << what;
      EXPECT_LT(sharded.parameter_bytes, replicated.parameter_bytes) << what;
    }
  }
};

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

// Under BF16 the fp32 masters are sharded too; loss-free balancing's bias (an fp32 value moved
// outside the optimizer, on every rank, and stored into the chunk that holds it) takes part.
TEST_F(DistributedOptimizerTest, AdamWAtDpTwoAndEpTwoBf16WithLossFreeBalancing) {
  const std::vector<std::string> set =
      with(kClipped, {"train.precision=BF16", "model.moe.bias_update_rate=0.0078125"});
  expect_same_weights({2, 1}, set, 0.05, "world 2 ep 1 (dp 2), AdamW bf16, score bias");
  expect_same_weights({2, 2}, set, 0.05, "world 2 ep 2 (dp 1), AdamW bf16, score bias");
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
  const std::vector<std::string> set =
      with(kClipped, {"train.optimizer.weight_decay=0.1", "data.vocab_max_size=5000"});
  expect_same_weights({4, 1}, set, 0.05, "world 4 ep 1 (dp 4), AdamW fp32");
  expect_same_weights({4, 1}, with(set, {"train.precision=BF16"}), 0.05,
                      "world 4 ep 1 (dp 4), AdamW bf16");
}

// Where a group's reduce_scatter would sum in another order than its all_reduce (NCCL beyond 2
// ranks; ArenaShard::exact_reduce_scatter false), reduce_gradients all-reduces the whole arena:
// the chunk holds the same sums, and so does the rest of the arena (a reduce-scatter leaves this
// rank's own gradients there). Four Local ranks, one dense arena of 5 blocks per rank, each rank
// with its own gradients.
TEST(GradientReductionTest, AnInexactReduceScatterIsReplacedByTheAllReduce) {
  const int64_t n = 4 * 5 * kernels::kSquaresBlock - 7;  // padded to 4 chunks of 5 blocks
  const Status s = comm::run_local_ranks(4, [&](comm::Communicator& c) -> Status {
    std::unique_ptr<Context> ctx = Context::host();
    std::vector<std::vector<float>> reduced;  // per setting: the whole arena after the reduction
    for (const bool exact : {true, false}) {
      ParameterSet params(ctx.get(), DType::kF32);
      params.add("w", {n});
      MOE_RETURN_IF_ERROR(params.allocate());
      MOE_ASSIGN_OR_RETURN(StateSharding sharding, shard_optimizer_state(&params, &c, nullptr));
      sharding.dense.exact_reduce_scatter = exact;
      float* g = params.grads(ParamKind::kDense).data<float>();
      for (int64_t i = 0; i < n; ++i) g[i] = 1.0f / static_cast<float>(1 + (i * 7 + c.rank()) % 13);
      MOE_RETURN_IF_ERROR(reduce_gradients(&params, &c, nullptr, sharding));
      reduced.emplace_back(g, g + n);
      const ArenaShard& shard = sharding.dense;
      for (int64_t i = 0; i < n; ++i) {
        const bool mine = i >= shard.begin() && i < shard.end();
        float sum = 0;
        for (int r = 0; r < 4; ++r) sum += 1.0f / static_cast<float>(1 + (i * 7 + r) % 13);
        const float own = 1.0f / static_cast<float>(1 + (i * 7 + c.rank()) % 13);
        const float want = mine || !exact ? sum : own;
        if (g[i] != want) {
          return internal_error("rank ", c.rank(), exact ? " exact" : " inexact", ": element ", i,
                                " is ", g[i], ", expected ", want);
        }
      }
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

}  // namespace
}  // namespace moe::testing
