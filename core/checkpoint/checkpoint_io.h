// Checkpoint directories of a run: RUN_DIR/ckpt-<8-digit step>/ holding manifest.pb and the files
// it lists. Reading verifies every file's size and CRC32 against the manifest.
#pragma once

#include <string>

#include "core/base/checkpoint_manifest.h"
#include "core/base/check.h"

namespace moe::ckpt {

std::string checkpoint_dir_name(int64_t step);  // "ckpt-00000120" (more digits past 99999999)

// kNotFound "no checkpoint in DIR (manifest.pb missing)"; kDataLoss when it does not parse.
StatusOr<CheckpointManifestInfo> read_manifest(const std::string& dir);
Status write_manifest(const std::string& dir, const CheckpointManifestInfo& info);
// kDataLoss naming the file: missing, wrong size ("file X is N bytes, manifest says M"), a CRC
// mismatch ("checksum mismatch in X"), or a listed path that leaves the directory ("/", "..").
Status verify_checkpoint_dir(const std::string& dir, const CheckpointManifestInfo& info);
// The size and CRC32 of dir/relative_path, as a manifest entry: call it on the files of an
// AtomicDirectory's path() before commit(). kNotFound when the file is missing.
StatusOr<CheckpointFileInfo> describe_file(const std::string& dir, const std::string& relative_path,
                                           CheckpointFileKind kind, int ep_rank, int ep_size);
// The newest ckpt-<step> directory of run_dir (highest step) whose manifest reads; temporary
// ".tmp"/".old" directories and other names are ignored. A committed directory always has its
// manifest (written last, before the rename), so this is the newest complete checkpoint. Its
// files are not checksummed here: a damaged one is reported by verify_checkpoint_dir, not
// silently passed over for an older checkpoint. kNotFound when there is none.
StatusOr<std::string> find_latest_checkpoint(const std::string& run_dir);
// Removes all but the `keep` newest complete checkpoints (as find_latest_checkpoint counts
// them). Directories without a readable manifest are neither counted nor removed, so damaged
// newer ones never push good ones out.
Status prune_checkpoints(const std::string& run_dir, int64_t keep);

}  // namespace moe::ckpt
