// Checkpoint manifests <-> protobuf bytes.
#pragma once

#include <string>

#include "base/status.h"
#include "types/checkpoint_manifest.h"

namespace moe {

// The bytes of manifest.pb: a ManifestFile (the manifest and its CRC32), deterministic (the
// `extra` map in key order).
std::string serialize_manifest(const CheckpointManifestInfo& info);
// Reads format 2 (checksummed) and format 1 (a bare manifest, which has no checksum).
// kDataLoss naming `path` when the checksum does not match, the bytes do not parse, or the
// format version is unknown (a corrupted version field reads as unknown).
StatusOr<CheckpointManifestInfo> parse_manifest(const std::string& bytes, const std::string& path);

}  // namespace moe
