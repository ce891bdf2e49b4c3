// The single-process training loop on a small real text: the loss falls, runs are bit-identical
// for a seed, resuming is bit-exact, attacked perplexity exceeds clean perplexity, statistics are
// written, and every bad input gives a clear error without overwriting anything.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/checkpoint/checkpoint_io.h"
#include "io/file_util.h"
#include "proto/stats_convert.h"
#include "tests/core/trainer_test_util.h"

namespace moe::testing {
namespace {
namespace fs = std::filesystem;

class TrainerTest : public SmallCorpusSuite<TrainerTest> {
 protected:
  static std::unique_ptr<Trainer> make(const std::string& run_dir,
                                       const std::vector<std::string>& set = {},
                                       bool resume = true) {
    StatusOr<RunConfig> cfg = tiny_config(*corpus_, "", set);
    EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
    StatusOr<std::unique_ptr<Trainer>> t =
        Trainer::create(*cfg, quiet_options(run_dir, resume), nullptr);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return t.ok() ? std::move(t).value() : nullptr;
  }
};

// Stated bound: the tiny model (vocabulary 1500, initial loss ~ ln 1500 = 7.3) must reach a mean
// token loss below 5.6 within 40 steps of 8 x 16 tokens (measured: 7.32 -> 5.07).
TEST_F(TrainerTest, LossFallsBelowBoundAndAttackHurts) {
  const std::string run = fresh_dir("trainer_loss");
  auto t = make(run, {"train.attack_rate=0.2"});
  ASSERT_NE(t, nullptr);
  double first = 0, last = 0;
  for (int i = 0; i < 40; ++i) {
    StatusOr<StepStatsInfo> s = t->step();
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    if (i == 0) first = s->loss;
    last = s->loss;
    EXPECT_FALSE(s->skipped);
    ASSERT_EQ(s->layers.size(), 3u);
  }
  EXPECT_GT(first, 6.8);
  EXPECT_LT(last, 5.6) << "first " << first;
  StatusOr<EvalReport> r = t->evaluate();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_TRUE(r->valid && r->attacked_valid && r->test && r->attacked_test);
  EXPECT_GT(r->attacked_valid->perplexity(), r->valid->perplexity());
  EXPECT_GT(r->attacked_test->perplexity(), r->test->perplexity());
  EXPECT_NEAR(r->attack_rate, 0.2, 0.03);

  // stats.pb holds one aggregated record per step, then the evaluation record.
  StatusOr<StatsFileContents> stats = read_stats_file(run + "/stats.pb");
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->steps.size(), 41u);
  EXPECT_EQ(stats->steps[39].step, 40);  // steps done after it
  EXPECT_EQ(stats->steps[39].layers.size(), 3u);
  EXPECT_EQ(stats->steps[39].layers[0].tokens, 8 * 16);
  EXPECT_GT(stats->steps[39].layers[1].mean_state_norm, 0.0);  // the momentum layer
  EXPECT_TRUE(stats->steps[40].valid_ppl.has_value());
  fs::remove_all(run);
}

TEST_F(TrainerTest, SameSeedIsBitIdenticalAndResumeIsBitExact) {
  const std::string a = fresh_dir("trainer_a"), b = fresh_dir("trainer_b");
  auto straight = make(a, {"train.steps=8"}, false);
  std::vector<double> straight_losses;
  for (int i = 0; i < 8; ++i) straight_losses.push_back(step_loss(*straight));

  auto same = make(b, {"train.steps=8"}, false);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(step_loss(*same), straight_losses[i]) << "step " << i;
  EXPECT_EQ(flat_parameters(same->model()), flat_parameters(straight->model()));

  // 4 steps, save, a new process resumes and takes 4 more: identical to 8 straight.
  fs::remove_all(b);
  auto first = make(b, {"train.steps=8"}, false);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(first->step().ok());
  ASSERT_TRUE(first->save().ok());
  first.reset();
  auto resumed = make(b, {"train.steps=8"}, true);
  ASSERT_EQ(resumed->steps_done(), 4);
  EXPECT_EQ(fs::path(resumed->resumed_from()).filename(), "ckpt-00000004");
  for (int i = 4; i < 8; ++i) EXPECT_EQ(step_loss(*resumed), straight_losses[i]) << "step " << i;
  EXPECT_EQ(flat_parameters(resumed->model()), flat_parameters(straight->model()));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST_F(TrainerTest, CheckpointAtStepZeroAndRunWritesFinalCheckpoint) {
  const std::string run = fresh_dir("trainer_zero");
  auto t = make(run, {"train.steps=0", "train.eval_sequences=8"});
  ASSERT_TRUE(t->run().ok());
  StatusOr<CheckpointManifestInfo> m = ckpt::read_manifest(run + "/ckpt-00000000");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->step, 0);
  EXPECT_EQ(m->files.size(), 5u);
  const std::vector<double> trained = flat_parameters(t->model());
  t.reset();  // the run directory belongs to one trainer at a time
  auto resumed = make(run, {"train.steps=2"});
  EXPECT_EQ(resumed->resumed_from(), run + "/ckpt-00000000");
  EXPECT_EQ(flat_parameters(resumed->model()), trained);
  fs::remove_all(run);
}

TEST_F(TrainerTest, CorruptedOrMismatchedCheckpointsAreRefusedAndKept) {
  const std::string run = fresh_dir("trainer_corrupt");
  auto t = make(run, {"train.steps=2"});
  ASSERT_TRUE(t->step().ok());
  StatusOr<std::string> dir = t->save();
  ASSERT_TRUE(dir.ok());
  t.reset();
  // Flip one byte of the dense parameters: the CRC catches it.
  const std::string dense = *dir + "/dense.safetensors";
  std::string bytes = *io::read_file(dense);
  bytes[bytes.size() / 2] ^= 0x5a;
  std::ofstream(dense, std::ios::binary) << bytes;
  StatusOr<RunConfig> cfg = tiny_config(*corpus_);
  StatusOr<std::unique_ptr<Trainer>> bad = Trainer::create(*cfg, quiet_options(run), nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("checksum mismatch in dense.safetensors"),
            std::string::npos)
      << bad.status().message();
  // Truncation is caught by the size check.
  std::ofstream(dense, std::ios::binary | std::ios::trunc) << bytes.substr(0, 100);
  bad = Trainer::create(*cfg, quiet_options(run), nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("manifest says"), std::string::npos)
      << bad.status().message();

  // A vocabulary that does not match the checkpoint: refused, naming both fingerprints; the
  // checkpoint is left as it was.
  const std::string run2 = fresh_dir("trainer_vocab");
  auto t2 = make(run2, {"train.steps=1"});
  ASSERT_TRUE(t2->save().ok());
  t2.reset();
  const std::string manifest_before = *io::read_file(run2 + "/ckpt-00000000/manifest.pb");
  StatusOr<RunConfig> other = tiny_config(*corpus_, "", {"data.vocab_max_size=1000"});
  TrainerOptions allow = quiet_options(run2);
  allow.allow_config_change = true;  // past the config check, to the vocabulary's
  bad = Trainer::create(*other, allow, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("tokenizer fingerprint"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(*io::read_file(run2 + "/ckpt-00000000/manifest.pb"), manifest_before);
  fs::remove_all(run);
  fs::remove_all(run2);
}

TEST_F(TrainerTest, BadDataInputsNameTheFile) {
  const std::string dir = fresh_dir("trainer_bad");
  std::ofstream(dir + "/empty.txt").close();
  std::ofstream(dir + "/tiny.txt") << "only a few words here\n";
  std::ofstream(dir + "/bad_utf8.txt") << "fine line\nbroken \xc3\x28 byte\n";
  auto error = [&](const std::string& train) {
    StatusOr<RunConfig> cfg = tiny_config(*corpus_, "", {"data.train=" + train});
    EXPECT_TRUE(cfg.ok());
    StatusOr<std::unique_ptr<Trainer>> t =
        Trainer::create(*cfg, quiet_options(dir + "/run", false), nullptr);
    return t.ok() ? std::string("ok") : t.status().message();
  };
  EXPECT_NE(error(dir + "/missing.txt").find(dir + "/missing.txt"), std::string::npos);
  EXPECT_NE(error(dir + "/empty.txt").find(dir + "/empty.txt"), std::string::npos);
  const std::string utf8 = error(dir + "/bad_utf8.txt");
  EXPECT_NE(utf8.find(dir + "/bad_utf8.txt"), std::string::npos) << utf8;
  EXPECT_NE(utf8.find("line 2"), std::string::npos) << utf8;
  const std::string small = error(dir + "/tiny.txt");
  EXPECT_NE(small.find(dir + "/tiny.txt"), std::string::npos) << small;
  EXPECT_NE(small.find("16"), std::string::npos) << small;  // the sequence length
  // model.vocab_size given and different from the corpus vocabulary.
  StatusOr<RunConfig> cfg = tiny_config(*corpus_, "", {"model.vocab_size=77"});
  StatusOr<std::unique_ptr<Trainer>> t =
      Trainer::create(*cfg, quiet_options(dir + "/run2", false), nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.vocab_size = 77"), std::string::npos);
  // A batch that does not divide.
  cfg = tiny_config(*corpus_, "", {"train.grad_accum=3"});
  t = Trainer::create(*cfg, quiet_options(dir + "/run3", false), nullptr);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not divisible by grad_accum (3)"), std::string::npos);
  fs::remove_all(dir);
}

TEST_F(TrainerTest, NonFiniteLossSkipsTheUpdateAndIsReported) {
  const std::string run = fresh_dir("trainer_nan");
  auto t = make(run, {"train.steps=3"});
  ASSERT_TRUE(t->step().ok());
  // Poison one positional embedding: every sequence then has a NaN loss.
  set_parameter(t->model(), "embed.positions", 0, std::nanf(""));
  const std::vector<double> before = flat_parameters(t->model());
  StatusOr<StepStatsInfo> s = t->step();
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_TRUE(s->skipped);
  ASSERT_FALSE(s->anomalies.empty());
  EXPECT_NE(s->anomalies[0].find("non-finite loss"), std::string::npos) << s->anomalies[0];
  const std::vector<double> after = flat_parameters(t->model());
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    if (std::isnan(before[i])) continue;  // the poisoned element
    ASSERT_EQ(before[i], after[i]) << "parameter " << i << " moved";
  }
  EXPECT_EQ(t->steps_done(), 2);  // the step counts (the data moves on), the update does not
  fs::remove_all(run);
}

// Same global batch in 1 or 2 micro-batches, 3 steps with `extra` settings: the two paths (other
// GEMM shapes) compare under cross-path equality, routing counted first, then losses and
// gradient norms within float32's derived bounds (trainer_test_util.h). Returns the first run.
// (The balance loss is per micro-batch, so only with its coefficient at 0 are the objectives
// identical.)
TrainingRecord expect_grad_accum_matches(const std::string& what, const std::string& corpus,
                                         const std::vector<std::string>& extra) {
  std::vector<std::string> common = {"train.steps=3", "model.moe.balance_loss_coef=0",
                                     "model.moe.z_loss_coef=0", "model.dropout=0",
                                     "model.moe.dropless=true"};
  common.insert(common.end(), extra.begin(), extra.end());
  std::vector<std::string> two = common;
  two.push_back("train.grad_accum=2");
  StatusOr<RunConfig> one_cfg = tiny_config(corpus, "", common),
                      two_cfg = tiny_config(corpus, "", two);
  EXPECT_TRUE(one_cfg.ok() && two_cfg.ok());
  if (!one_cfg.ok() || !two_cfg.ok()) return {};
  const std::string a = fresh_dir(what + "_1"), b = fresh_dir(what + "_2");
  auto one_batch = Trainer::create(*one_cfg, quiet_options(a, false), nullptr);
  auto accumulated = Trainer::create(*two_cfg, quiet_options(b, false), nullptr);
  EXPECT_TRUE(one_batch.ok() && accumulated.ok());
  TrainingRecord r1, r2;
  for (int i = 0; i < 3 && one_batch.ok() && accumulated.ok(); ++i) {
    StatusOr<StepStatsInfo> s1 = (*one_batch)->step(), s2 = (*accumulated)->step();
    EXPECT_TRUE(s1.ok() && s2.ok());
    if (!s1.ok() || !s2.ok()) break;
    r1.add(*s1);
    r2.add(*s2);
  }
  if (one_batch.ok()) {
    expect_same_training(r1, r2,
                         training_scale(*one_cfg, (*one_batch)->model().config().vocab_size), what);
  }
  fs::remove_all(a);
  fs::remove_all(b);
  return r1;
}

TEST_F(TrainerTest, GradientAccumulationMatchesOneBigBatch) {
  expect_grad_accum_matches("grad_accum", *corpus_, {});
}

// The same with plain SGD and no clipping: nothing normalises the gradient, so a wrong scale of
// the accumulated gradient (a micro-batch's share not divided out) changes the weights and every
// later loss, besides the gradient norms.
TEST_F(TrainerTest, GradientAccumulationMatchesOneBigBatchUnderPlainSgd) {
  const TrainingRecord r = expect_grad_accum_matches(
      "grad_accum_sgd", *corpus_,
      {"train.optimizer.kind=SGD", "train.optimizer.lr=0.5", "train.grad_clip=0"});
  ASSERT_EQ(r.losses.size(), 3u);
  EXPECT_LT(r.losses.back(), r.losses.front()) << "SGD at this rate does not learn";
}

// Clipping rescales the gradient to norm grad_clip: under plain SGD (no momentum, no weight decay)
// a clipped step moves the parameters by exactly lr x grad_clip in L2 norm, whatever the gradient.
// Rounding: each float32 parameter is rounded once after its update, an error of at most 2^-24 of
// its value, so the measured step length is within 2^-24 ||theta|| (twice, for both copies) of it.
TEST_F(TrainerTest, ClippedStepHasLengthLearningRateTimesThreshold) {
  const std::string run = fresh_dir("trainer_clip");
  const double clip = 0.05;
  auto t =
      make(run,
           {"train.optimizer.kind=SGD", "train.optimizer.lr=0.5", "train.optimizer.weight_decay=0",
            "train.optimizer.momentum=0", "train.grad_clip=0.05", "train.steps=3"},
           false);
  ASSERT_NE(t, nullptr);
  for (int i = 0; i < 3; ++i) {
    const std::vector<double> before = flat_parameters(t->model());
    StatusOr<StepStatsInfo> s = t->step();
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    ASSERT_GT(s->grad_norm, 2 * clip) << "step " << i << ": the gradient must be clipped here";
    const std::vector<double> after = flat_parameters(t->model());
    ASSERT_EQ(after.size(), before.size());
    double moved = 0, norm = 0;
    for (size_t j = 0; j < after.size(); ++j) {
      moved += (after[j] - before[j]) * (after[j] - before[j]);
      norm += after[j] * after[j];
    }
    const double want = s->learning_rate * clip;
    ASSERT_GT(want, 0) << "step " << i;
    EXPECT_NEAR(std::sqrt(moved), want, 2 * std::ldexp(std::sqrt(norm), -24) + 1e-12 * want)
        << "step " << i << ", grad norm " << s->grad_norm << ", lr " << s->learning_rate;
  }
  fs::remove_all(run);
}

// Every trainer test runs under a guarded context (quiet_options): a host access to tensor memory
// in a layer or the model aborts the test. Here the waits are counted too: in capacity mode a
// training step synchronises exactly once (the step buffer's read back); each dropless MoE layer
// adds one counts read per forward (the probe's forward included); an evaluation adds one per
// split (with an eval capacity; evaluation is dropless by default, one counts read per MoE layer
// and batch). The probe drops at the training capacity, so it adds no sync in capacity mode.
TEST_F(TrainerTest, OneSyncPerStepAndNoHostAccessInLayers) {
  const std::string run = fresh_dir("trainer_syncs");
  auto t = make(
      run, {"train.steps=4", "train.probe_every=2", "model.moe.eval_capacity_factor=1.25"}, false);
  ASSERT_TRUE(t->context().guarded());
  for (int i = 0; i < 4; ++i) {
    const int64_t before = t->context().sync_count();
    ASSERT_TRUE(t->step().ok());
    EXPECT_EQ(t->context().sync_count() - before, 1) << "step " << i;
  }
  int64_t before = t->context().sync_count();
  ASSERT_TRUE(t->evaluate().ok());
  EXPECT_EQ(t->context().sync_count() - before, 4);  // valid, test, attacked valid, attacked test

  // Dropless: the tiny model has 3 MoE layers; the probe (steps 0 and 2) adds a forward.
  auto d = make(fresh_dir("trainer_syncs_dropless"),
                {"train.steps=4", "train.probe_every=2", "model.moe.dropless=true"}, false);
  for (int i = 0; i < 4; ++i) {
    before = d->context().sync_count();
    ASSERT_TRUE(d->step().ok());
    EXPECT_EQ(d->context().sync_count() - before, 1 + 3 + (i % 2 == 0 ? 3 : 0)) << "step " << i;
  }
  fs::remove_all(run);
}

}  // namespace
}  // namespace moe::testing
