// Run configuration files (protobuf text format, message momoe.RunConfig) -> validated RunConfig.
// `--set` overrides address single fields by dotted path ("train.steps=100",
// "model.moe.heavy_ball.mu=0.5", "data.train=\"my.txt\"" or data.train=my.txt for strings).
#pragma once

#include <string>
#include <vector>

#include "types/run_config.h"

namespace moe {

// Parses `text` (from `source`, for messages), applies the overrides in order, resolves the model
// plan (arch string or blocks, MoE defaults) and validates everything except the vocabulary size,
// which may still be 0 (the trainer fills it from the vocabulary and calls
// ModelConfig::validate). `ep_size` overrides parallel.ep when > 0 (the --ep flag).
StatusOr<RunConfig> parse_run_config(const std::string& text, const std::string& source,
                                     const std::vector<std::string>& overrides = {},
                                     int ep_size = 0);
// Reads the file first (kNotFound naming it when missing, kInvalidArgument when it is not a
// regular file).
StatusOr<RunConfig> load_run_config(const std::string& path,
                                    const std::vector<std::string>& overrides = {},
                                    int ep_size = 0);

// The resolved configuration in protobuf text format: every field explicit, defaults included
// (enums never left UNSPECIFIED), the model plan as explicit blocks with their full MoE configs.
// parse_run_config of it gives back the same RunConfig whatever this build's defaults are, so a
// checkpoint that stores it determines its model (RunConfig::text holds it).
std::string resolved_config_text(const RunConfig& cfg);

// One field that differs between two configurations: its dotted path and both values in text
// format ("(unset)" when absent; "N entries" for a repeated field of another length).
struct ConfigChange {
  std::string path;  // e.g. "model.blocks[1].moe.top_k"
  std::string before, after;
};
// Every field that differs between two configs in text format (resolved ones compare exactly).
StatusOr<std::vector<ConfigChange>> diff_configs(const std::string& before,
                                                 const std::string& after);
// Whether a change alters what training computes (the model, the optimiser and its schedule,
// the batch, the seed, the training data), as opposed to the layout, the length of the run,
// logging, evaluation, checkpointing, precision, device or activation recomputation.
bool changes_training(const ConfigChange& change);

}  // namespace moe
