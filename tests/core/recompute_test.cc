// Activation recomputation (train.recompute; core/model/transformer.h): SELECTIVE and FULL train
// exactly what NONE trains. Every model family in configs/ and the blocks of current models
// (configs/modern/), shrunk to test size with every dropout active, in FP32 and BF16, capacity
// and dropless routing, and two expert-parallel ranks (the Local backend's threads): per step the
// loss, the whole statistics record (router statistics, aux loss, gradient norm: a replay that
// counted anything twice shows there) and every parameter's gradient, then every weight, equal
// NONE's bit for bit (the kernels are deterministic and every random draw is keyed by token, so
// a recomputed tensor is the same bits; a recomputation that drew another dropout mask, replayed
// with another step's keys or routed differently changes the gradients). The loss-free
// balancing bias (modern/deepseek-v3) is a weight: a replay that added its load twice moves it.
// And recomputation happens: the tensors a training forward keeps follow the setting, and each
// setting's measured peak is below the last's; a replay counts nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "comm/local_communicator.h"
#include "tests/core/trainer_test_util.h"
#include "tests/testing/gradient_check.h"
#include "types/step_stats_json.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

constexpr int kSteps = 4;

// One rank's record of a run.
struct RankRun {
  std::vector<double> losses;              // per step
  std::vector<std::string> records;        // per step: the statistics record, timings left out
  std::vector<std::vector<double>> grads;  // per step: every gradient (after the reduction)
  std::vector<int64_t> peaks;              // per step: the allocator's measured peak
  std::vector<double> params;              // every master after the last step
};

// Bitwise, so -0.0 against 0.0 or two NaN payloads count as different too.
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

std::vector<double> flat_gradients(TransformerLM& model) {
  std::vector<double> out;
  for (const auto& p : model.params().all()) {
    StatusOr<Tensor> host = model.context().read_back(p->grad);
    EXPECT_TRUE(host.ok()) << host.status().to_string();
    if (!host.ok()) return out;
    const float* v = host->data<float>();
    out.insert(out.end(), v, v + p->numel());
  }
  return out;
}

// The step's record as JSON, without what is measured rather than computed.
std::string computed_record(StepStatsInfo s) {
  s.step_seconds = 0;
  s.tokens_per_second = 0;
  s.phases.reset();
  s.peak_tensor_bytes.reset();
  s.peak_rss_bytes.reset();
  return step_stats_json(s);
}

class RecomputeTest : public SmallCorpusSuite<RecomputeTest> {
 protected:
  // `family` at test size with every dropout active and train.recompute = `recompute`.
  static StatusOr<RunConfig> config(const std::string& family, const std::string& recompute,
                                    const std::vector<std::string>& extra) {
    std::vector<std::string> set = {"model.dropout=0.1",
                                    "model.attention_dropout=0.1",
                                    "model.moe.expert_dropout=0.1",
                                    "model.moe.output_dropout=0.1",
                                    "data.cache_dir=" + *corpus_ + "/cache",
                                    "train.schedule.warmup_steps=2",
                                    "train.recompute=" + recompute};
    set.insert(set.end(), extra.begin(), extra.end());
    return small_family_config(family, *corpus_, kSteps, set);
  }

  // kSteps steps on `world` ranks (threads of this process); one record per rank.
  static std::vector<RankRun> train(const RunConfig& cfg, int world) {
    std::vector<RankRun> runs(world);
    const std::string dir = fresh_dir("recompute_run");
    auto body = [&](comm::Communicator* comm) -> Status {
      MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t,
                           Trainer::create(cfg, quiet_options(dir, false), comm));
      RankRun& r = runs[comm == nullptr ? 0 : comm->rank()];
      for (int i = 0; i < kSteps; ++i) {
        MOE_ASSIGN_OR_RETURN(StepStatsInfo s, t->step());
        r.losses.push_back(s.loss);
        r.peaks.push_back(s.peak_tensor_bytes.value_or(-1));
        r.records.push_back(computed_record(s));
        r.grads.push_back(flat_gradients(t->model()));
      }
      r.params = flat_parameters(t->model());
      return Status::OK();
    };
    const Status s =
        world == 1 ? body(nullptr)
                   : comm::run_local_ranks(world, [&](comm::Communicator& c) { return body(&c); });
    EXPECT_TRUE(s.ok()) << s.to_string();
    fs::remove_all(dir);
    return runs;
  }

  // NONE, SELECTIVE and FULL of `family` with `extra`, in FP32 and BF16: the same bits.
  static void expect_same_training(const std::string& family, const std::vector<std::string>& extra,
                                   int world) {
    for (const std::string precision : {"FP32", "BF16"}) {
      std::vector<std::string> set = extra;
      set.push_back("train.precision=" + precision);
      std::vector<std::vector<RankRun>> runs;
      for (const std::string recompute : {"NONE", "SELECTIVE", "FULL"}) {
        StatusOr<RunConfig> cfg = config(family, recompute, set);
        ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
        runs.push_back(train(*cfg, world));
      }
      const std::vector<RankRun>& none = runs[0];
      for (int setting = 1; setting <= 2; ++setting) {
        for (int rank = 0; rank < world; ++rank) {
          const std::string what = str_cat(family, " ", precision, " ",
                                           setting == 1 ? "SELECTIVE" : "FULL", " rank ", rank);
          expect_same_run(none[rank], runs[setting][rank], what);
          // The kept activations shrink: each setting's peak below the last's (the first step's
          // may be set by the optimizer state's first allocation instead: not above).
          const std::vector<int64_t>& less = runs[setting][rank].peaks;
          const std::vector<int64_t>& more = runs[setting - 1][rank].peaks;
          ASSERT_EQ(less.size(), more.size()) << what;
          for (size_t i = 0; i < less.size(); ++i) {
            if (i == 0) {
              EXPECT_LE(less[i], more[i]) << what << " step 1: peak tensor bytes";
            } else {
              EXPECT_LT(less[i], more[i]) << what << " step " << i + 1 << ": peak tensor bytes";
            }
          }
        }
      }
    }
  }

  static void expect_same_run(const RankRun& none, const RankRun& r, const std::string& what) {
    ASSERT_EQ(none.losses.size(), static_cast<size_t>(kSteps)) << what;
    ASSERT_EQ(r.losses.size(), none.losses.size()) << what;
    EXPECT_TRUE(same_bits(r.losses, none.losses)) << what << ": losses differ";
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(r.records[i], none.records[i]) << what << " step " << i + 1 << ": statistics";
      EXPECT_TRUE(same_bits(r.grads[i], none.grads[i]))
          << what << " step " << i + 1 << ": gradients differ";
    }
    ASSERT_FALSE(none.params.empty()) << what;
    EXPECT_TRUE(same_bits(r.params, none.params)) << what << ": weights differ";
  }
};

TEST_F(RecomputeTest, EveryFamilyTrainsTheSameBits) {
  for (const std::string& family : config_families()) {
    SCOPED_TRACE(family);
    expect_same_training(family, {}, 1);
  }
}

// The block of current models: RMSNorm, RoPE, SwiGLU, no biases, pre-norm; DeepSeek-V3's
// sigmoid routing in groups, shared experts, loss-free balancing and sequence-wise loss,
// dropless.
TEST_F(RecomputeTest, ModernBlocksTrainTheSameBits) {
  for (const std::string family : {"modern/mixtral", "modern/deepseek-v3", "modern/qwen3-moe"}) {
    SCOPED_TRACE(family);
    expect_same_training(family, {}, 1);
  }
}

// Both routing modes on one model: capacity drops (the quick start's) and dropless (whose plan
// reads the exchanged counts, again in a replay).
TEST_F(RecomputeTest, CapacityAndDroplessRoutingTrainTheSameBits) {
  for (const std::string mode : {"model.moe.dropless=false", "model.moe.dropless=true"}) {
    SCOPED_TRACE(mode);
    expect_same_training("quickstart", {mode, "model.moe.capacity_factor=1.0"}, 1);
  }
}

// The loss in chunks of 7 rows (train.loss_chunk_tokens; the last chunk short): NONE keeps every
// chunk's logits, SELECTIVE and FULL recompute them chunk by chunk in backward.
TEST_F(RecomputeTest, TheLossInChunksTrainsTheSameBits) {
  expect_same_training("quickstart", {"train.loss_chunk_tokens=7"}, 1);
  expect_same_training("modern/deepseek-v3", {"train.loss_chunk_tokens=7", "parallel.ep=2"}, 2);
}

// Two expert-parallel ranks: a replay repeats the layer's exchanges (and the global aux sums and
// AC statistics) on both ranks in the same order; each rank's losses, gradients (its experts')
// and weights equal its NONE run's.
TEST_F(RecomputeTest, ExpertParallelRanksTrainTheSameBits) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"momentum", {"parallel.ep=2", "model.moe.dropless=false"}},
      {"momentum", {"parallel.ep=2", "model.moe.dropless=true"}},
      {"acmoe", {"parallel.ep=2", "model.moe.ac.global_stats=true"}},
      {"modern/deepseek-v3", {"parallel.ep=2"}}};
  for (const auto& [family, set] : cases) {
    SCOPED_TRACE(family + " " + set.back());
    expect_same_training(family, set, 2);
  }
}

// What a training forward keeps follows the setting: NONE every block's Saved with the hidden
// rows; SELECTIVE the same Saved without the experts', shared experts' and dense FFNs' hidden
// rows (their input rows kept); FULL no Saved at all, but each block's input and entering state.
// Evaluation keeps every Saved whatever the setting. Backward frees each part once used.
TEST_F(RecomputeTest, TheKeptTensorsFollowTheSetting) {
  StatusOr<RunConfig> cfg = config("modern/deepseek-v3", "NONE", {"model.arch=sgsfsg"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  cfg->model.vocab_size = 50;
  ASSERT_TRUE(cfg->model.validate(1).ok());
  auto model = TransformerLM::create(cfg->model, &host_context(), DType::kF32, nullptr);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_TRUE((*model)->init_parameters(3).ok());
  const int64_t batch = 2, s = cfg->model.seq_len;
  Tensor inputs = Tensor::empty({batch, s}, DType::kI32);
  for (int64_t i = 0; i < inputs.numel(); ++i) inputs.data<int32_t>()[i] = (i * 7) % 50;
  for (const Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    for (const bool training : {true, false}) {
      SCOPED_TRACE(str_cat(recompute_name(r), training ? " training" : " evaluation"));
      StepContext ctx;
      ctx.batch = batch;
      ctx.seq_len = s;
      ctx.training = training;
      ctx.recompute = r;
      TransformerLM::Activations acts;
      ASSERT_TRUE((*model)->forward(inputs, inputs, ctx, &acts, {}, {}).ok());
      const bool full = training && r == Recompute::kFull;
      const bool hidden_kept = !training || r == Recompute::kNone;
      ASSERT_EQ(acts.blocks.size(), full ? 0u : (*model)->blocks().size());
      ASSERT_EQ(acts.block_inputs.size(), full ? (*model)->blocks().size() : 0u);
      for (size_t b = 0; b < acts.blocks.size(); ++b) {
        const TransformerBlock::Saved& saved = acts.blocks[b];
        if ((*model)->blocks()[b]->is_moe()) {
          EXPECT_GT(saved.moe.experts.x.numel(), 0) << "block " << b;
          EXPECT_EQ(saved.moe.experts.h.numel() > 0, hidden_kept) << "block " << b;
          EXPECT_EQ(saved.moe.experts.h_pre.numel() > 0, hidden_kept) << "block " << b;
          EXPECT_EQ(saved.moe.shared.ffn.h.numel() > 0, hidden_kept) << "block " << b;
          EXPECT_EQ(saved.moe.shared.ffn.recompute_hidden, !hidden_kept) << "block " << b;
        } else {
          EXPECT_GT(saved.ffn.x.numel(), 0) << "block " << b;
          EXPECT_EQ(saved.ffn.h.numel() > 0, hidden_kept) << "block " << b;
          EXPECT_EQ(saved.ffn.h_pre.numel() > 0, hidden_kept) << "block " << b;
        }
      }
      for (size_t b = 0; b < acts.block_inputs.size(); ++b) {
        EXPECT_EQ(acts.block_inputs[b].h.numel(), batch * s * cfg->model.d_model) << "block " << b;
        // The state enters every block after the first MoE layer (block 0 here).
        EXPECT_EQ(acts.block_inputs[b].state.p.numel() > 0, b > 0) << "block " << b;
      }
      if (!training) continue;
      ASSERT_TRUE((*model)->backward(&acts, 1.0, 1.0).ok());
      // Backward frees what it has used: the logits, each block's tensors or kept input.
      EXPECT_TRUE(acts.logits.empty());
      for (size_t b = 0; b < acts.blocks.size(); ++b) {
        EXPECT_EQ(acts.blocks[b].attn.qkv.numel(), 0) << "block " << b;
        EXPECT_EQ(acts.blocks[b].moe.experts.x.numel() + acts.blocks[b].ffn.x.numel(), 0)
            << "block " << b;
      }
      for (size_t b = 0; b < acts.block_inputs.size(); ++b) {
        EXPECT_EQ(acts.block_inputs[b].h.numel(), 0) << "block " << b;
      }
    }
  }
}

// A replay (StepContext::replay, FULL's re-run of a block's forward) counts nothing: loss-free
// balancing's bias, which a training forward's loads move at the step's update, stays where it
// is after forwards that were all replays. (In training a doubled load would hide: the update
// moves by the sign of mean - load, which doubling every load keeps.)
TEST_F(RecomputeTest, AReplayCountsNothing) {
  StatusOr<RunConfig> cfg = config("modern/deepseek-v3", "FULL", {});
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  cfg->model.vocab_size = 50;
  ASSERT_TRUE(cfg->model.validate(1).ok());
  for (const bool replay : {true, false}) {
    SCOPED_TRACE(replay ? "replays" : "forwards");
    auto model = TransformerLM::create(cfg->model, &host_context(), DType::kF32, nullptr);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    ASSERT_TRUE((*model)->init_parameters(3).ok());
    const int64_t batch = 2, s = cfg->model.seq_len;
    Tensor inputs = Tensor::empty({batch, s}, DType::kI32);
    for (int64_t i = 0; i < inputs.numel(); ++i) inputs.data<int32_t>()[i] = (i * 7) % 50;
    StepContext ctx;
    ctx.batch = batch;
    ctx.seq_len = s;
    ctx.replay = replay;
    for (int i = 0; i < 2; ++i) {
      TransformerLM::Activations acts;
      ASSERT_TRUE((*model)->forward(inputs, inputs, ctx, &acts, {}, {}).ok());
    }
    ASSERT_TRUE((*model)->update_score_biases(true).ok());
    const Parameter* bias = (*model)->params().find("blocks.0.moe.score_bias");
    ASSERT_NE(bias, nullptr);
    const std::vector<double> v = parameter_values(**model, *bias);
    const bool moved = std::any_of(v.begin(), v.end(), [](double x) { return x != 0; });
    EXPECT_EQ(moved, !replay);
  }
}

}  // namespace
}  // namespace moe::testing
