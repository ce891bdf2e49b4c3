// Shared fixtures for trainer tests: a small real corpus (slices of the bundled Brown validation
// split) in a temporary directory, and a tiny run configuration over it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/train/trainer.h"
#include "types/run_config.h"

namespace moe::testing {

// A fresh temporary directory (removed and recreated), unique per process and name; removed
// again when the test process exits, also after failed tests.
std::string fresh_dir(const std::string& name);

// Writes train/valid/test text files cut from data/brown/valid.txt.gz into `dir` (train_lines,
// then 200 lines each for valid and test). Returns the run-config `data { ... }` block.
std::string write_small_corpus(const std::string& dir, int train_lines = 2500);

// A test suite over the small corpus (write_small_corpus), written into a fresh directory
// (*corpus_) before the suite's first test and removed after its last, also when tests fail.
// Derived is the suite's class, so that each suite has its own; Base is its gtest base.
template <typename Derived, typename Base = ::testing::Test>
class SmallCorpusSuite : public Base {
 public:
  static void SetUpTestSuite() {
    corpus_ = new std::string(fresh_dir(std::string("corpus_") + typeid(Derived).name()));
    ASSERT_FALSE(write_small_corpus(*corpus_).empty());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*corpus_);
    delete corpus_;
    corpus_ = nullptr;
  }

 protected:
  static std::string* corpus_;
};
template <typename Derived, typename Base>
std::string* SmallCorpusSuite<Derived, Base>::corpus_ = nullptr;

// The source tree: $MOMOE_SOURCE_DIR when set (test binaries carried to another machine, as by
// tests/run_gpu.sh), else the tree they were built from.
std::string source_root();
// The model families: the names (stems, sorted) of configs/*.pbtxt, or of configs/<folder>/*.pbtxt
// as "<folder>/<stem>" (the recipes of current models: "modern").
std::vector<std::string> config_families(const std::string& folder = "");
// configs/<family>.pbtxt.
std::string family_config_path(const std::string& family);

// A model family (configs/<family>.pbtxt) shrunk to test size on the small corpus in corpus_dir:
// its arch, routing and residual settings with small widths (4 experts; 16 narrower ones where
// the family routes to more than 4: DeepSeek-V3, Qwen3-MoE), `steps` steps, no evaluation or
// checkpoint along the way, a probe every 10 steps; `extra` overrides come last.
StatusOr<RunConfig> small_family_config(const std::string& family, const std::string& corpus_dir,
                                        int64_t steps, const std::vector<std::string>& extra = {});

// A tiny model and training setup over the small corpus; `extra` is appended to the text.
// MOMOE_TEST_DEVICE (CPU or CUDA) in the environment sets train.device (before `overrides`).
StatusOr<RunConfig> tiny_config(const std::string& corpus_dir, const std::string& extra = "",
                                const std::vector<std::string>& overrides = {}, int ep = 0);

// No progress output, and the host context guards host access to its tensors: every trainer test
// also proves that layers and the model never touch tensor memory on the host.
TrainerOptions quiet_options(const std::string& run_dir, bool resume = true);

// Every parameter's master of a model, concatenated in registration order (f32 as double),
// read back from the model's context.
std::vector<double> flat_parameters(TransformerLM& model);
// One training step's loss; a failed step fails the test and gives NaN.
double step_loss(Trainer& t);
// One parameter's master values, read back (a sharded master fails the test: trainer_masters).
std::vector<double> parameter_values(TransformerLM& model, const Parameter& p);
// Every parameter's master values of a trainer's model, in registration order: gathered from the
// chunks where the distributed optimizer shards them (Optimizer::whole_masters; collective over
// each sharded kind's group, so every rank calls it).
std::vector<std::vector<double>> trainer_masters(Trainer& t);
// One parameter's value (what the layers compute with: a bf16 working copy, widened, or f32),
// read back.
std::vector<double> parameter_working_values(TransformerLM& model, const Parameter& p);
// Sets element `index` of a parameter's master (and refreshes the working copies).
void set_parameter(TransformerLM& model, const std::string& name, int64_t index, float value);

// Comparing two runs of the same training on two paths (EP/DP layouts, a checkpoint resharded,
// the GPU against the CPU): they compute the same sums in other orders, so the rule of
// tests/testing/cross_path.h applies. Decisions first: each step's routing counters (expert
// loads, capacity drops, AC cluster sizes, SparseMixer's set counts) are compared per layer; a
// token whose top-k choice sits within rounding of a tie may go to another expert (a routing
// flip: which tokens flip depends on the BLAS kernel's rounding, not on a bug). Before the first
// flip the losses agree within the precision's epsilon x (the forward's depth x the steps so far,
// whose rounding the weights carry, + the loss: cross_path.h's loss_tolerance); each moved token
// may then add its own loss's worth (<= 2 ln V) over the step's tokens. (Counters see every flip
// that changes a value but two opposite moves in one layer and step, which cancel in the loads.)
struct TrainingRecord {
  std::vector<double> losses;                       // per step
  std::vector<double> grad_norms;                   // per step, before clipping
  std::vector<std::vector<RouterStatsInfo>> steps;  // [step][MoE layer]: the decision counters
  void add(const StepStatsInfo& s);
  // The steps of a run resumed from this one's end, after this one's.
  void append(const TrainingRecord& later);
};
// What the bounds are derived from, for one configuration.
struct TrainingScale {
  double eps = 0;      // the precision's epsilon (float32)
  int depth = 0;       // forward_depth(model).total
  int64_t tokens = 0;  // tokens per optimizer step
  int64_t vocab = 0;
  double lr = 0;  // peak learning rate
  // AdamW's largest step in units of lr: |m_hat| / sqrt(v_hat) <= (1 - b1) / sqrt((1 - b2)
  // (1 - b1^2 / b2)) by Cauchy-Schwarz (7.3 for 0.9, 0.999); 0 for SGD (no bound without one
  // on the gradient).
  double adam_step = 0;
};
TrainingScale training_scale(const RunConfig& cfg, int64_t vocab);
struct RoutingDifference {
  int64_t moved = 0;   // tokens whose decisions differ (a lower bound from the counters)
  int64_t first = -1;  // the first step whose counters differ (-1: none)
  std::vector<int64_t> moved_by_step;  // cumulative, per step
};
RoutingDifference routing_difference(const TrainingRecord& a, const TrainingRecord& b);
// Losses per step under the bounds above; the gradient norms too until the first flip, within
// epsilon x (forward and backward: twice the depth) x steps x the norm (a gradient scale error,
// a lost average over ranks or micro-batches, moves them by a factor, which a normalising
// optimizer and clipping would hide from the losses); and that flips stay rare (at most 8 tokens
// per step on average, of the step's tokens x K x layers decisions: a bug moves a large share of
// them). Returns the worst relative per-step difference.
double expect_same_training(const TrainingRecord& a, const TrainingRecord& b,
                            const TrainingScale& scale, const std::string& what);
// One parameter tensor of the two runs after `steps` steps. Each run moves a weight by at most
// adam_step x lr per step, so no entry parts by more than 2 x steps x adam_step x lr. An entry
// parts by more than one step's worth (lr) only where the two runs stepped differently: a
// gradient hovering at zero or a ReLU pre-activation at its kink whose rounding tips one way in
// one run and the other way in the other, or (after a routing flip) a weight a moved token
// reaches; rounding alone moves an entry's step by eps x depth of it. So at most 1 entry in 32
// (or 4) parts by more than lr, 1 in 4 after a flip, and without a flip the median stays within
// 2 x steps x adam_step x lr x eps x depth. A layout bug moves most of a tensor.
void expect_parameters_close(const std::vector<double>& a, const std::vector<double>& b,
                             const RoutingDifference& d, const TrainingScale& scale, int64_t steps,
                             const std::string& what);

}  // namespace moe::testing
