// MoE layer configuration <-> protobuf text format. The only entry points core/ and the launcher
// use; generated protobuf types stay inside proto/.
#pragma once

#include <string>

#include "types/moe_config.h"

namespace moe {

// Parses a `momoe.MoeConfig` in protobuf text format, applies the defaults of MoeLayerConfig to
// absent fields, and validates. Errors name the field (prefixed with `where`) and the allowed
// range; text-format syntax errors name the line and column.
StatusOr<MoeLayerConfig> parse_moe_config_text(const std::string& text,
                                               const std::string& where = "moe", int ep_size = 1);
// The full config (every field explicit) in protobuf text format; parses back to the same struct.
std::string moe_config_to_text(const MoeLayerConfig& cfg);

}  // namespace moe
