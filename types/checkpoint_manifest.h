// Plain form of proto/checkpoint.proto's CheckpointManifest (see there for the fields).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moe {

enum class CheckpointFileKind { kDense, kExpertShard, kOptimizerDense, kOptimizerExpert, kOther };

struct CheckpointFileInfo {
  std::string path;
  uint64_t size_bytes = 0;
  uint32_t crc32 = 0;
  CheckpointFileKind kind = CheckpointFileKind::kOther;
  int32_t ep_rank = 0;
  int32_t ep_size = 1;
};

struct CheckpointManifestInfo {
  // 2: manifest.pb is a checksummed ManifestFile and config_text is the resolved config.
  // 1: a bare CheckpointManifest with the config as the user wrote it (still read).
  static constexpr uint32_t kFormatVersion = 2;
  uint32_t format_version = kFormatVersion;
  int64_t step = 0;
  int64_t updates = 0;
  int64_t created_unix_time = 0;
  std::string config_text;
  std::vector<CheckpointFileInfo> files;
  uint64_t seed = 0;
  uint64_t data_epoch = 0;
  int64_t data_position = 0;
  int32_t world_size = 1, ep_size = 1, dp_size = 1;
  uint64_t vocab_fingerprint = 0;
  std::string dtype;
  std::map<std::string, std::string> extra;
  std::string run_id;  // empty in format 1
  // The lineage (proto/checkpoint.proto): the branch that wrote it (its run_id when the manifest
  // predates branches), the checkpoint directory name the branch started from ("" for a run's
  // first branch), and the ancestor branches, oldest first.
  std::string branch;
  std::string parent;
  std::vector<std::string> lineage;
};

}  // namespace moe
