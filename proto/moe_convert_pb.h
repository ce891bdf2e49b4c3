// proto/-internal: conversions between momoe.MoeConfig and MoeLayerConfig, shared by the other
// converters of this folder (the model config embeds MoeConfig). Includes generated code; never
// include it outside proto/.
#pragma once

#include "proto/moe.pb.h"
#include "types/moe_config.h"

namespace moe::proto_internal {

// Overlays the fields present in `msg` onto `*cfg` (absent fields keep their current values), so
// a per-layer message can override a model-wide default. Does not validate.
Status apply_moe_proto(const momoe::MoeConfig& msg, const std::string& where, MoeLayerConfig* cfg);
void moe_config_to_proto(const MoeLayerConfig& cfg, momoe::MoeConfig* msg);
// Clears every field of `*block` (recursively) that holds what `base` holds, so that `block`
// keeps only its overrides of `base` (a model's per-block MoE configs against model.moe): an
// override of model.moe then reaches every block that did not set that field itself.
void strip_inherited(const google::protobuf::Message& base, google::protobuf::Message* block);

// Parses protobuf text into `msg`, turning syntax errors into kInvalidArgument naming `where`,
// the line and the column.
Status parse_text_proto(const std::string& text, const std::string& where,
                        google::protobuf::Message* msg);

}  // namespace moe::proto_internal
