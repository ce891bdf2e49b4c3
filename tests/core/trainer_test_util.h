// Shared fixtures for trainer tests: a small real corpus (slices of the bundled Brown validation
// split) in a temporary directory, and a tiny run configuration over it.
#pragma once

#include <string>
#include <vector>

#include "core/base/run_config.h"
#include "core/train/trainer.h"

namespace moe::testing {

// A fresh temporary directory (removed and recreated), unique per process and name.
std::string fresh_dir(const std::string& name);

// Writes train/valid/test text files cut from data/brown/valid.txt.gz into `dir` (train_lines,
// then 200 lines each for valid and test). Returns the run-config `data { ... }` block.
std::string write_small_corpus(const std::string& dir, int train_lines = 2500);

// The model families: the names (stems, sorted) of configs/*.pbtxt.
std::vector<std::string> config_families();
// configs/<family>.pbtxt.
std::string family_config_path(const std::string& family);

// A tiny model and training setup over the small corpus; `extra` is appended to the text.
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

}  // namespace moe::testing
