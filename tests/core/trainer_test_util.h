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

// A tiny model and training setup over the small corpus; `extra` is appended to the text.
StatusOr<RunConfig> tiny_config(const std::string& corpus_dir, const std::string& extra = "",
                                const std::vector<std::string>& overrides = {}, int ep = 0);

TrainerOptions quiet_options(const std::string& run_dir, bool resume = true);

// Every parameter of a model, concatenated in registration order (f32 as double).
std::vector<double> flat_parameters(TransformerLM& model);

}  // namespace moe::testing
