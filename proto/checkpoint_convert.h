// Checkpoint manifests <-> protobuf bytes.
#pragma once

#include <string>

#include "core/base/checkpoint_manifest.h"
#include "core/base/status.h"

namespace moe {

// Deterministic bytes (the `extra` map in key order).
std::string serialize_manifest(const CheckpointManifestInfo& info);
// kDataLoss naming `path` when the bytes do not parse; kFailedPrecondition for an unknown
// format version.
StatusOr<CheckpointManifestInfo> parse_manifest(const std::string& bytes, const std::string& path);

}  // namespace moe
