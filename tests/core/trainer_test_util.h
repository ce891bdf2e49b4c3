// Shared fixtures for trainer tests: a small real corpus (slices of the bundled Brown validation
// split) in a temporary directory, and a tiny run configuration over it.
#pragma once

#include <string>
#include <vector>

#include "core/base/run_config.h"
#include "core/train/trainer.h"

namespace moe::testing {

// A fresh temporary directory (removed and recreated), unique per process and name; removed
// again when the test process exits, also after failed tests.
std::string fresh_dir(const std::string& name);

// Writes train/valid/test text files cut from data/brown/valid.txt.gz into `dir` (train_lines,
// then 200 lines each for valid and test). Returns the run-config `data { ... }` block.
std::string write_small_corpus(const std::string& dir, int train_lines = 2500);

// The source tree: $MOMOE_SOURCE_DIR when set (test binaries carried to another machine, as by
// tests/run_gpu.sh), else the tree they were built from.
std::string source_root();
// The model families: the names (stems, sorted) of configs/*.pbtxt.
std::vector<std::string> config_families();
// configs/<family>.pbtxt.
std::string family_config_path(const std::string& family);

// A model family (configs/<family>.pbtxt) shrunk to test size on the small corpus in corpus_dir:
// its arch, routing and residual settings with small widths, `steps` steps, no evaluation or
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
// One parameter's master values, read back.
std::vector<double> parameter_values(TransformerLM& model, const Parameter& p);
// Sets element `index` of a parameter's master (and refreshes the working copies).
void set_parameter(TransformerLM& model, const std::string& name, int64_t index, float value);

// Comparing two runs of the same training on different layouts (EP/DP splits, a checkpoint
// resharded): they compute the same sums in other orders, so f32 results agree to rounding until
// a token whose top-k choice sits within rounding of a tie goes to another expert (a routing
// flip: which tokens flip depends on the BLAS kernel's rounding, not on a bug). A flip shows in
// the per-step expert loads; before the first one the runs agree tightly, after it they drift by
// a few optimizer steps' worth.
using StepLoads = std::vector<std::vector<std::vector<int64_t>>>;  // [step][layer][expert]
struct RoutingDifference {
  int64_t moved = 0;    // tokens routed to another expert, summed over steps and layers
  int64_t first = -1;   // the first step whose loads differ (-1: none)
};
RoutingDifference routing_difference(const StepLoads& a, const StepLoads& b);
// Losses per step (2e-5 relative before the first flip, 1e-3 after) and that flips stay rare
// (a handful of tokens; a layout bug moves many). Parameters: parameter_tolerance().
void expect_same_training(const std::vector<double>& a_losses, const std::vector<double>& b_losses,
                          const StepLoads& a_loads, const StepLoads& b_loads,
                          const std::string& what);
// One parameter tensor of the two runs. Most entries agree to 2e-4 (AdamW moves a weight by about
// lr per step whatever its gradient's size, so rounding shows at that scale). Where rounding tips
// a ReLU pre-activation sitting at its kink, or a gradient hovering at zero, one way in one run
// and the other way in the other, a hidden unit's column of an expert's w1 (seen under OpenBLAS's
// Sandybridge and Nehalem kernels: 12 of 4096 entries, up to 1.9e-3) parts by up to a few lr: at
// most 1 entry in 32 (or 4) may differ by up to 1e-2. A layout bug moves most of a tensor. After a
// routing flip a whole expert takes another token's gradient: only the 1e-2 bound holds.
void expect_parameters_close(const std::vector<double>& a, const std::vector<double>& b,
                             const RoutingDifference& d, const std::string& what);

}  // namespace moe::testing
