// Expert and data parallelism end to end on the Local backend (ranks as threads): EP = 1, 2, 4 and
// EP 2 x DP 2 train the same model on the same global batches and must give the same losses and
// the same final parameters (with softmax routing, with DeepSeek-V3's sigmoid routing and
// sequence-wise loss, with loss-free balancing, and with the block and routing of current models
// under MomentumSMoE and Robust dynamics); a checkpoint saved at one EP size resumes at another
// (also with the loss-free bias in it); statistics
// aggregate to the single-process values; a failing rank ends every rank with an error; the
// distributed optimizer's checkpoints resume with or without it, at any layout.
//
// Tolerance: the layouts compute the same sums in different orders (GEMM shapes, gradient
// all-reduce order), so f32 results agree to rounding, not bit for bit: losses to 2e-5 relative,
// parameters to 2e-4 absolute after 20 AdamW steps but for a few entries (AdamW's update is ~lr
// per step whatever the gradient's size, so a gradient near zero whose sign rounding flips parts
// the weights by up to a few lr), unless rounding routed a token near a tie to another expert
// (expect_same_training, expect_parameters_close in trainer_test_util.h: which entries and
// tokens depends on the BLAS kernel's rounding). Layouts across hosts (parallel.placement = HOSTS,
// the hierarchical all-to-all) are the exception: they compute exactly what the flat layout of
// the same EP x DP computes, so they are compared with it bit for bit.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>

#include "comm/local_communicator.h"
#include "tests/core/trainer_test_util.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

struct LayoutResult {
  TrainingRecord record;  // rank 0's aggregated loss and routing counters per step
  std::map<std::string, std::vector<double>> params;  // global tensors (experts reassembled)
  std::vector<StepStatsInfo> steps;  // rank 0's aggregated statistics (layers cleared)
  std::vector<std::vector<RouterStatsInfo>> layers;  // ... and their layers, per step
  TrainingScale scale;
};

class ParallelTrainerTest : public SmallCorpusSuite<ParallelTrainerTest> {
 protected:
  // Trains `steps` steps on `world` ranks with EP `ep` in run_dir (resuming when a checkpoint is
  // there), optionally saving at the end. host_of(rank), when given, names the host each rank
  // poses as (TrainerOptions::host_name).
  static LayoutResult train(int world, int ep, int steps, const std::string& run_dir,
                            const std::vector<std::string>& set, bool save_at_end = false,
                            const std::function<std::string(int)>& host_of = nullptr) {
    LayoutResult result;
    std::mutex mu;
    auto body = [&](comm::Communicator* comm) -> Status {
      std::vector<std::string> overrides = set;
      MOE_ASSIGN_OR_RETURN(RunConfig cfg, tiny_config(*corpus_, "", overrides, ep));
      const int rank = comm == nullptr ? 0 : comm->rank();
      TrainerOptions options = quiet_options(run_dir);
      if (host_of) options.host_name = host_of(rank);
      MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::create(cfg, options, comm));
      for (int i = 0; i < steps; ++i) {
        MOE_ASSIGN_OR_RETURN(StepStatsInfo s, t->step());
        if (rank == 0) {
          std::lock_guard<std::mutex> lock(mu);
          result.record.add(s);
          result.layers.push_back(s.layers);
          s.layers.clear();
          result.steps.push_back(s);
        }
      }
      if (save_at_end) MOE_RETURN_IF_ERROR(t->save().status());
      if (rank == 0) result.scale = training_scale(cfg, t->model().config().vocab_size);
      const std::vector<std::vector<double>> values = trainer_masters(*t);  // collective
      std::lock_guard<std::mutex> lock(mu);
      size_t i = 0;
      for (const auto& p : t->model().params().all()) {
        const std::vector<double>& v = values[i++];
        if (p->kind == ParamKind::kDense) {
          if (rank == 0) result.params[p->name] = v;
          continue;
        }
        const int64_t per_expert = p->numel() / p->shape[0];
        std::vector<double>& global = result.params[p->name];
        global.resize(p->global_experts * per_expert);
        std::copy(v.begin(), v.end(), global.begin() + p->first_expert * per_expert);
      }
      return Status::OK();
    };
    if (world == 1) {
      Status s = body(nullptr);
      EXPECT_TRUE(s.ok()) << s.to_string();
    } else {
      Status s = comm::run_local_ranks(world, [&](comm::Communicator& c) { return body(&c); });
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    return result;
  }

  // Two layouts of one training: decisions counted, then losses and weights within the bounds
  // derived in trainer_test_util.h (cross-path equality; the layouts sum in other orders).
  static void expect_close(const LayoutResult& a, const LayoutResult& b, const std::string& what) {
    expect_same_training(a.record, b.record, a.scale, what);
    const RoutingDifference routing = routing_difference(a.record, b.record);
    ASSERT_EQ(a.params.size(), b.params.size()) << what;
    const auto steps = static_cast<int64_t>(a.record.losses.size());
    for (const auto& [name, va] : a.params) {
      expect_parameters_close(va, b.params.at(name), routing, a.scale, steps, what + " " + name);
    }
  }

  // 4 steps at layout `a` (world, ep) with `set_a`, saved, then 4 more resumed in the same run
  // directory at `b` with `set_b`: the joined record and the final weights.
  static LayoutResult resumed(const std::string& name, std::pair<int, int> a,
                              const std::vector<std::string>& set_a, std::pair<int, int> b,
                              const std::vector<std::string>& set_b) {
    const std::string dir = fresh_dir(name);
    LayoutResult first = train(a.first, a.second, 4, dir, set_a, /*save_at_end=*/true);
    LayoutResult second = train(b.first, b.second, 4, dir, set_b);
    LayoutResult joined = second;
    joined.record = first.record;
    joined.record.append(second.record);
    return joined;
  }

  // The distributed optimizer switched on -> off and off -> on at a resume, at EP 2 x DP 2:
  // the straight 8-step run's losses, gradient norms and weights, bit for bit.
  static void expect_switching_is_exact(const LayoutResult& straight,
                                        const std::vector<std::string>& on,
                                        const std::vector<std::string>& off,
                                        const std::string& name) {
    const LayoutResult on_off = resumed(name + "_on_off", {4, 2}, on, {4, 2}, off);
    const LayoutResult off_on = resumed(name + "_off_on", {4, 2}, off, {4, 2}, on);
    for (const auto* r : {&on_off, &off_on}) {
      const std::string what =
          str_cat(name, r == &on_off ? ": on -> off" : ": off -> on", " at EP 2 x DP 2");
      EXPECT_EQ(r->record.losses, straight.record.losses) << what;
      EXPECT_EQ(r->record.grad_norms, straight.record.grad_norms) << what;
      EXPECT_TRUE(r->params == straight.params) << what << ": the weights differ";
    }
  }
};

// Dropless routing and the global-batch balance loss make the objective independent of the
// layout (capacity is per source rank by design, so with drops the layouts legitimately differ).
const std::vector<std::string> kEquivalent = {"model.moe.dropless=true", "train.probe_every=0"};

TEST_F(ParallelTrainerTest, EpOneTwoFourAndTwoByTwoGiveTheSameTraining) {
  const int steps = 20;
  LayoutResult single = train(1, 1, steps, fresh_dir("par_single"), kEquivalent);
  ASSERT_EQ(single.record.losses.size(), static_cast<size_t>(steps));
  EXPECT_LT(single.record.losses.back(), single.record.losses.front() - 0.3);  // it does learn
  const std::vector<std::pair<int, int>> layouts = {{2, 2}, {4, 4}, {4, 2}, {2, 1}};
  for (auto [world, ep] : layouts) {
    const std::string name = "world " + std::to_string(world) + " ep " + std::to_string(ep);
    LayoutResult r =
        train(world, ep, steps,
              fresh_dir("par_" + std::to_string(world) + "_" + std::to_string(ep)), kEquivalent);
    // Aggregated loads are sums over ranks: the same global counts as one process (checked per
    // step and layer by expect_close, up to the rare routing flip).
    expect_close(single, r, name);
  }
}

// Two layouts of one training that must agree bit for bit: every step's loss, gradient norm and
// routing counters, and every weight.
void expect_identical(const LayoutResult& a, const LayoutResult& b, const std::string& what) {
  ASSERT_FALSE(a.record.losses.empty()) << what;
  EXPECT_EQ(a.record.losses, b.record.losses) << what;
  EXPECT_EQ(a.record.grad_norms, b.record.grad_norms) << what;
  ASSERT_EQ(a.record.steps.size(), b.record.steps.size()) << what;
  for (size_t n = 0; n < a.record.steps.size(); ++n) {
    ASSERT_EQ(a.record.steps[n].size(), b.record.steps[n].size()) << what;
    for (size_t l = 0; l < a.record.steps[n].size(); ++l) {
      EXPECT_EQ(a.record.steps[n][l].expert_load, b.record.steps[n][l].expert_load)
          << what << " step " << n << " layer " << l;
    }
  }
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (const auto& [name, va] : a.params) EXPECT_EQ(va, b.params.at(name)) << what << " " << name;
}

// Layouts across hosts, the ranks posing as two hosts: EP 4 over both hosts with the staged
// (hierarchical) exchange, and EP 2 x DP 2 placed by host, train exactly as the flat layout: the
// same losses, routing and weights, bit for bit. By design, not by luck: the staged exchange
// moves the same rows to the same places as the flat one (it computes nothing), and a placement
// only changes which process plays which layout position, while everything a rank computes (its
// slice of each micro-batch, its random draws' sequence offsets, its place in every reduction
// and gather over the world) goes by position. Host names round-robin (h0 h1 h0 h1, mpirun
// --map-by node), so under HOSTS world ranks 1 and 2 swap positions; dropless (all_to_all_v, the
// counts exchanged) and capacity mode (all_to_all) both.
TEST_F(ParallelTrainerTest, LayoutsAcrossHostsTrainBitForBitLikeTheFlatLayout) {
  const int steps = 6;
  const auto round_robin = [](int rank) { return "h" + std::to_string(rank % 2); };
  const auto consecutive = [](int rank) { return "h" + std::to_string(rank / 2); };
  std::vector<std::string> hosts = kEquivalent, staged = kEquivalent;
  hosts.push_back("parallel.placement=HOSTS");
  staged.push_back("parallel.placement=HOSTS");
  staged.push_back("parallel.hierarchical_all_to_all=true");
  LayoutResult flat4 = train(4, 4, steps, fresh_dir("par_host_flat4"), kEquivalent);
  expect_identical(flat4,
                   train(4, 4, steps, fresh_dir("par_host_staged4"), staged, false, round_robin),
                   "EP 4 over 2 hosts, hierarchical all-to-all, dropless");
  LayoutResult flat22 = train(4, 2, steps, fresh_dir("par_host_flat22"), kEquivalent);
  expect_identical(flat22,
                   train(4, 2, steps, fresh_dir("par_host_hosts22"), hosts, false, round_robin),
                   "EP 2 x DP 2 placed by host (round-robin names)");
  const std::vector<std::string> capacity = {"train.probe_every=0"};
  std::vector<std::string> capacity_staged = capacity;
  capacity_staged.push_back("parallel.hierarchical_all_to_all=true");
  expect_identical(
      train(4, 4, steps, fresh_dir("par_host_cap4"), capacity),
      train(4, 4, steps, fresh_dir("par_host_cap_staged4"), capacity_staged, false, consecutive),
      "EP 4 over 2 hosts, hierarchical all-to-all, capacity mode");
}

// Every step records where its time went (base/phase_timer.h): forward, backward and the
// optimizer take time, the phases fit in the step, and the MoE exchange is timed inside forward
// and backward only when there is one (EP > 1).
TEST_F(ParallelTrainerTest, StepPhasesAreTimedAndTheExchangeOnlyAcrossEpRanks) {
  for (int ep : {1, 2}) {
    const std::string dir = fresh_dir("par_phases_" + std::to_string(ep));
    LayoutResult r = train(ep, ep, 3, dir, kEquivalent);
    ASSERT_EQ(r.steps.size(), 3u);
    for (const StepStatsInfo& s : r.steps) {
      const std::string what = "ep " + std::to_string(ep) + " step " + std::to_string(s.step);
      ASSERT_TRUE(s.phases.has_value()) << what;
      const PhaseSecondsArray& p = *s.phases;
      const auto at = [&](Phase phase) { return p[static_cast<int>(phase)]; };
      EXPECT_GT(at(Phase::kForward), 0) << what;
      EXPECT_GT(at(Phase::kBackward), 0) << what;
      EXPECT_GT(at(Phase::kGradSync), 0) << what;
      EXPECT_GT(at(Phase::kOptimizer), 0) << what;
      // Every micro-batch is read on the host and timed (Trainer::accumulate_gradients), inside
      // the step.
      // Aggregated, phases and the step time are each the slowest rank's, so the bound holds.
      EXPECT_GT(at(Phase::kData), 0) << what;
      EXPECT_LE(at(Phase::kData), s.step_seconds) << what;
      // Phases are disjoint but for the exchange, inside forward and backward. Aggregated, each
      // phase is the slowest rank's, so only one rank's sum is bounded by the step.
      EXPECT_LE(at(Phase::kExchange), at(Phase::kForward) + at(Phase::kBackward)) << what;
      if (ep == 1) {
        EXPECT_EQ(at(Phase::kExchange), 0) << what;
        double sum = 0;
        for (int i = 0; i < kNumPhases; ++i) {
          if (static_cast<Phase>(i) != Phase::kExchange) sum += p[i];
        }
        EXPECT_LE(sum, s.step_seconds) << what;
      } else {
        EXPECT_GT(at(Phase::kExchange), 0) << what;
      }
    }
    fs::remove_all(dir);
  }
}

TEST_F(ParallelTrainerTest, GlobalAcStatisticsAreLayoutIndependent) {
  std::vector<std::string> set = kEquivalent;
  set.push_back("model.arch=sgsgscsc");
  set.push_back("model.moe.ac.global_stats=true");
  LayoutResult single = train(1, 1, 8, fresh_dir("par_ac1"), set);
  LayoutResult four = train(4, 2, 8, fresh_dir("par_ac4"), set);
  expect_close(single, four, "AC with global statistics, ep 2 x dp 2");
}

// DeepSeek-V3's routing (sigmoid scores, scaled gates, the sequence-wise balance loss as a mean
// over every data rank's sequences): one process, EP 2 and DP 2 train alike.
TEST_F(ParallelTrainerTest, SigmoidRoutingAndSequenceLossAreLayoutIndependent) {
  std::vector<std::string> set = kEquivalent;
  set.push_back("model.moe.score_function=SIGMOID");
  set.push_back("model.moe.routed_scaling=2.5");
  set.push_back("model.moe.seq_balance_loss_coef=0.1");
  LayoutResult single = train(1, 1, 8, fresh_dir("par_sig1"), set);
  ASSERT_EQ(single.record.losses.size(), 8u);
  LayoutResult softmax = train(1, 1, 8, fresh_dir("par_sig_softmax"), kEquivalent);
  EXPECT_NE(single.record.losses.back(), softmax.record.losses.back())
      << "the options took no effect";
  LayoutResult ep2 = train(2, 2, 8, fresh_dir("par_sig_ep2"), set);
  expect_close(single, ep2, "sigmoid routing with the sequence loss, ep 2");
  LayoutResult dp2 = train(2, 1, 8, fresh_dir("par_sig_dp2"), set);
  expect_close(single, dp2, "sigmoid routing with the sequence loss, dp 2");
}

// Loss-free balancing (DeepSeek-V3): every step's bias, as the step reports it, is the previous
// step's moved by rate * sign(mean load - load) over that step's global loads, exactly (the rate
// is a power of two and the biases stay small multiples of it), starting from zero; the bias
// changes the routing; one process, EP 2 and DP 2 train alike, and a checkpoint saved at EP 2
// (the bias in it) resumes on one process.
TEST_F(ParallelTrainerTest, LossFreeBiasMovesByTheGlobalLoadsInEveryLayout) {
  const double rate = 1.0 / 128;
  std::vector<std::string> set = kEquivalent;
  set.push_back("model.moe.score_function=SIGMOID");
  set.push_back("model.moe.balance_loss_coef=0");
  set.push_back("model.moe.bias_update_rate=0.0078125");
  LayoutResult single = train(1, 1, 6, fresh_dir("par_lf1"), set);
  ASSERT_EQ(single.layers.size(), 6u);
  bool moved = false;
  for (size_t n = 0; n < single.layers.size(); ++n) {
    for (size_t l = 0; l < single.layers[n].size(); ++l) {
      const RouterStatsInfo& now = single.layers[n][l];
      const size_t e_count = now.expert_load.size();
      ASSERT_EQ(now.score_bias.size(), e_count) << "step " << n << " layer " << l;
      for (size_t e = 0; e < e_count; ++e) {
        double want = 0;
        if (n > 0) {
          const RouterStatsInfo& before = single.layers[n - 1][l];
          double mean = 0;
          for (int64_t c : before.expert_load) mean += static_cast<double>(c);
          mean /= static_cast<double>(e_count);
          const double load = static_cast<double>(before.expert_load[e]);
          want = before.score_bias[e] + rate * (load < mean ? 1 : load > mean ? -1 : 0);
        }
        EXPECT_EQ(now.score_bias[e], want) << "step " << n << " layer " << l << " expert " << e;
        moved |= now.score_bias[e] != 0;
      }
    }
  }
  EXPECT_TRUE(moved) << "no bias moved in 6 steps";
  std::vector<std::string> frozen = set;
  frozen.back() = "model.moe.bias_update_rate=0";
  LayoutResult without = train(1, 1, 6, fresh_dir("par_lf0"), frozen);
  EXPECT_NE(single.record.losses.back(), without.record.losses.back())
      << "the bias did not change the routing";
  expect_close(single, train(2, 2, 6, fresh_dir("par_lf_ep2"), set), "loss-free bias, ep 2");
  expect_close(single, train(2, 1, 6, fresh_dir("par_lf_dp2"), set), "loss-free bias, dp 2");
  const std::string dir = fresh_dir("par_lf_resume");
  LayoutResult first = train(2, 2, 3, dir, set, /*save_at_end=*/true);
  LayoutResult second = train(1, 1, 3, dir, set);  // resumes at step 3, the bias from the file
  LayoutResult joined = second;
  joined.record = first.record;
  joined.record.append(second.record);
  expect_close(single, joined, "loss-free bias saved at EP 2, resumed on one process");
}

// The block of current models (pre-norm RMSNorm, RoPE, SwiGLU, no biases, Qwen3's q/k norm) with
// DeepSeek-V3's routing (sigmoid, scaled, node-limited to one of two groups, the sequence loss,
// loss-free balancing) and a shared expert under Qwen2-MoE's gate: one process, EP 2, DP 2 and
// EP 2 x DP 2 train alike, and an EP 2 checkpoint resumes at EP 4 (where a group spans two ranks).
TEST_F(ParallelTrainerTest, TheBlockAndRoutingOfCurrentModelsAreLayoutIndependent) {
  std::vector<std::string> set = kEquivalent;
  for (const char* s :
       {"model.block_style=PRE_LN", "model.norm=RMS_NORM", "model.position=ROPE",
        "model.activation=SWIGLU", "model.moe.activation=SWIGLU", "model.linear_bias=false",
        "model.qk_norm=true", "model.moe.score_function=SIGMOID", "model.moe.routed_scaling=2.5",
        "model.moe.expert_groups=2", "model.moe.max_ep_ranks=1", "model.moe.shared_experts=1",
        "model.moe.shared_expert_gate=true", "model.moe.seq_balance_loss_coef=0.01",
        "model.moe.bias_update_rate=0.0078125"}) {
    set.push_back(s);
  }
  LayoutResult single = train(1, 1, 6, fresh_dir("par_modern1"), set);
  ASSERT_EQ(single.record.losses.size(), 6u);
  expect_close(single, train(2, 2, 6, fresh_dir("par_modern_ep2"), set), "modern, ep 2");
  expect_close(single, train(2, 1, 6, fresh_dir("par_modern_dp2"), set), "modern, dp 2");
  const std::string dir = fresh_dir("par_modern_resume");
  LayoutResult first = train(2, 2, 3, dir, set, /*save_at_end=*/true);
  LayoutResult second = train(4, 4, 3, dir, set);  // resumes at step 3, EP 4
  LayoutResult joined = second;
  joined.record = first.record;
  joined.record.append(second.record);
  expect_close(single, joined, "modern, EP 2 checkpoint resumed at EP 4");
}

TEST_F(ParallelTrainerTest, CheckpointSavedAtOneEpSizeResumesAtAnother) {
  const std::string straight_dir = fresh_dir("par_straight"), resharded = fresh_dir("par_reshard");
  LayoutResult straight = train(4, 4, 8, straight_dir, kEquivalent);
  LayoutResult first = train(2, 2, 4, resharded, kEquivalent, /*save_at_end=*/true);
  ASSERT_TRUE(fs::exists(resharded + "/ckpt-00000004/experts-ep1-of-2.safetensors"));
  LayoutResult second = train(4, 4, 4, resharded, kEquivalent);  // resumes at step 4, EP 4
  LayoutResult joined = second;
  joined.record = first.record;
  joined.record.append(second.record);
  expect_close(straight, joined, "EP 2 checkpoint resumed at EP 4");
  // And back down to a single process.
  const std::string down = fresh_dir("par_down");
  LayoutResult a = train(4, 2, 4, down, kEquivalent, true);
  LayoutResult b = train(1, 1, 4, down, kEquivalent);
  LayoutResult joined2 = b;
  joined2.record = a.record;
  joined2.record.append(b.record);
  expect_close(straight, joined2, "EP 2 x DP 2 checkpoint resumed on one process");
}

// The distributed optimizer's checkpoints hold the whole state (gathered from the chunks, by
// name), so a run resumes with or without the option and at another layout. On one layout the
// resumed run is the straight one bit for bit (the sharded optimizer computes the replicated
// one's weights, and resuming is exact): on -> off and off -> on. Across layouts (DP 2 -> DP 1,
// EP 1 -> EP 4) the cross-path bounds apply, as for any resharding.
TEST_F(ParallelTrainerTest, DistributedOptimizerStateResumesWithOrWithoutItAtAnyLayout) {
  std::vector<std::string> on = kEquivalent;
  on.push_back("train.distributed_optimizer=true");
  const std::vector<std::string>& off = kEquivalent;
  LayoutResult straight = train(4, 2, 8, fresh_dir("par_zero_straight"), off);
  expect_switching_is_exact(straight, on, off, "par_zero");
  expect_close(straight, resumed("par_zero_dp", {4, 2}, on, {2, 2}, on),
               "distributed optimizer at EP 2 x DP 2 resumed at EP 2 x DP 1");
  expect_close(straight, resumed("par_zero_ep", {2, 1}, on, {4, 4}, off),
               "distributed optimizer at DP 2 resumed at EP 4 without it");
}

// Under BF16 the option shards the fp32 masters too; the checkpoints still hold them whole, so
// the same holds: on -> off and off -> on at EP 2 x DP 2 bit for bit, and DP 4 -> EP 2 x DP 1
// (sharded masters gathered at one size, cut at another) within the cross-path bounds.
TEST_F(ParallelTrainerTest, DistributedOptimizerBf16MastersResumeWithOrWithoutItAtAnyLayout) {
  std::vector<std::string> off = kEquivalent;
  off.push_back("train.precision=BF16");
  off.push_back("data.vocab_max_size=5000");  // dense parameters in every rank's chunk
  std::vector<std::string> on = off;
  on.push_back("train.distributed_optimizer=true");
  LayoutResult straight = train(4, 2, 8, fresh_dir("par_zero_bf16_straight"), off);
  expect_switching_is_exact(straight, on, off, "par_zero_bf16");
  expect_close(straight, resumed("par_zero_bf16_dp", {4, 1}, on, {2, 2}, on),
               "BF16 distributed optimizer at DP 4 resumed at EP 2 x DP 1");
}

TEST_F(ParallelTrainerTest, MismatchedConfigsAndIndivisibleLayoutsAreErrors) {
  // Rank 1 sets another learning rate: every rank fails, naming rank 1.
  Status s = comm::run_local_ranks(2, [&](comm::Communicator& c) -> Status {
    std::vector<std::string> set = kEquivalent;
    if (c.rank() == 1) set.push_back("train.optimizer.lr=0.5");
    MOE_ASSIGN_OR_RETURN(RunConfig cfg, tiny_config(*corpus_, "", set, 1));
    return Trainer::create(cfg,
                           quiet_options(fresh_dir("par_mismatch_" + std::to_string(c.rank()))), &c)
        .status();
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank(s) 1 run a different configuration"), std::string::npos)
      << s.message();
  // 3 ranks cannot hold EP 2.
  const std::string three = fresh_dir("par_three");
  s = comm::run_local_ranks(3, [&](comm::Communicator& c) -> Status {
    MOE_ASSIGN_OR_RETURN(RunConfig cfg, tiny_config(*corpus_, "", kEquivalent, 2));
    return Trainer::create(cfg, quiet_options(three), &c).status();
  });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("world size 3 is not divisible by --ep 2"), std::string::npos)
      << s.message();
  // EP 3 does not divide 4 experts (caught when the config is read).
  StatusOr<RunConfig> cfg = tiny_config(*corpus_, "", kEquivalent, 3);
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("not divisible by the expert-parallel size 3"),
            std::string::npos);
}

// Quickly: the failure aborts the world, so its peers stop waiting at once instead of running into
// the collective timeout. The bound is derived from that timeout, set here: without the abort the
// peers wait in step 3 for rank 3 from no earlier than their last collective with it (before it
// failed), so they return no sooner than kTimeout after the failure, less rank 3's optimizer step
// (milliseconds); with it, the time from the failure to the end is thread wake-ups and unwinding,
// which half the timeout (10 s) covers on any loaded machine.
TEST_F(ParallelTrainerTest, AFailingRankEndsEveryRankQuickly) {
  const double kTimeout = 20;
  std::vector<std::string> set = kEquivalent;
  set.push_back("parallel.timeout_seconds=" + std::to_string(kTimeout));
  const std::string dir = fresh_dir("par_fail");
  std::mutex mu;
  std::chrono::steady_clock::time_point failed_at;
  bool failed = false;
  Status s = comm::run_local_ranks(4, [&](comm::Communicator& c) -> Status {
    MOE_ASSIGN_OR_RETURN(RunConfig cfg, tiny_config(*corpus_, "", set, 2));
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::create(cfg, quiet_options(dir), &c));
    for (int i = 0; i < 6; ++i) {
      if (c.rank() == 3 && i == 2) {
        std::lock_guard<std::mutex> lock(mu);
        failed_at = std::chrono::steady_clock::now();
        failed = true;
        return internal_error("injected failure");
      }
      MOE_RETURN_IF_ERROR(t->step().status());
    }
    return Status::OK();
  });
  const auto ended = std::chrono::steady_clock::now();
  ASSERT_FALSE(s.ok());
  ASSERT_TRUE(failed) << "rank 3 never reached its failure: " << s.to_string();
  EXPECT_NE(s.message().find("rank 3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("injected failure"), std::string::npos) << s.message();
  const double seconds = std::chrono::duration<double>(ended - failed_at).count();
  EXPECT_LT(seconds, kTimeout / 2) << "the peers ran into the " << kTimeout << " s timeout";
}

}  // namespace
}  // namespace moe::testing
