// Run configuration files (protobuf text format, message momoe.RunConfig) -> validated RunConfig.
// `--set` overrides address single fields by dotted path ("train.steps=100",
// "model.moe.heavy_ball.mu=0.5", "data.train=\"my.txt\"" or data.train=my.txt for strings).
#pragma once

#include <string>
#include <vector>

#include "core/base/run_config.h"

namespace moe {

// Parses `text` (from `source`, for messages), applies the overrides in order, resolves the model
// plan (arch string or blocks, MoE defaults) and validates everything except the vocabulary size,
// which may still be 0 (the trainer fills it from the vocabulary and calls
// ModelConfig::validate). `ep_size` overrides parallel.ep when > 0 (the --ep flag).
StatusOr<RunConfig> parse_run_config(const std::string& text, const std::string& source,
                                     const std::vector<std::string>& overrides = {},
                                     int ep_size = 0);
// Reads the file first (kNotFound naming it when missing).
StatusOr<RunConfig> load_run_config(const std::string& path,
                                    const std::vector<std::string>& overrides = {},
                                    int ep_size = 0);

}  // namespace moe
