// Checkpoint directories of a run: RUN_DIR/ckpt-<8-digit step>/ holding manifest.pb and the files
// it lists. Reading verifies the manifest's own checksum and every file's size and CRC32.
//
// Crash safety. A name "ckpt-<step>" without a suffix is always a whole checkpoint: it is written
// as "ckpt-<step>.tmp" and renamed; an existing checkpoint of the same step is first renamed to
// "ckpt-<step>.trash" (or, when it is not this run's, moved aside to "ckpt-<step>.aside-<time>"
// and kept); pruning renames to "*.trash" before deleting. recover_checkpoints() finishes or
// undoes whatever a crash interrupted. Nothing is deleted that this run did not write.
#pragma once

#include <string>
#include <vector>

#include "base/check.h"
#include "io/file_util.h"
#include "types/checkpoint_manifest.h"

namespace moe::ckpt {

std::string checkpoint_dir_name(int64_t step);  // "ckpt-00000120" (more digits past 99999999)

// kNotFound "no checkpoint in DIR (manifest.pb missing)"; kDataLoss when it is corrupted.
StatusOr<CheckpointManifestInfo> read_manifest(const std::string& dir);
Status write_manifest(const std::string& dir, const CheckpointManifestInfo& info);
// kDataLoss naming the file: missing, wrong size ("file X is N bytes, manifest says M"), a CRC
// mismatch ("checksum mismatch in X"), or a listed path that leaves the directory ("/", "..").
// Without `checksums` only presence and sizes are checked (no file is read).
Status verify_checkpoint_dir(const std::string& dir, const CheckpointManifestInfo& info,
                             bool checksums = true);
// read_manifest, then verify_checkpoint_dir with checksums.
Status verify_checkpoint(const std::string& dir);
// The size and CRC32 of dir/relative_path, as a manifest entry: call it on the files of an
// AtomicDirectory's path() before commit(). kNotFound when the file is missing.
StatusOr<CheckpointFileInfo> describe_file(const std::string& dir, const std::string& relative_path,
                                           CheckpointFileKind kind, int ep_rank, int ep_size);

struct CheckpointDir {
  int64_t step = 0;
  std::string path;
};
// The ckpt-<digits> directories of run_dir (no suffix), ascending by step.
std::vector<CheckpointDir> list_checkpoints(const std::string& run_dir);

// The checkpoint to resume from: the newest ckpt-<step> directory, after a cheap check (its
// manifest and checksum, the listed files present with their sizes; restoring verifies the
// file checksums). kNotFound when there is none. When the newest is damaged it is not passed
// over silently: kDataLoss naming it and why, and the newest intact older checkpoint with the
// flag to resume from it (see damaged_checkpoint_error).
StatusOr<std::string> find_resume_checkpoint(const std::string& run_dir);
// The error for a damaged checkpoint `dir` of run_dir: `why`, then the newest intact checkpoint
// older than it (fully verified) and how to resume from it, or that there is none.
Status damaged_checkpoint_error(const std::string& run_dir, const std::string& dir,
                                const Status& why);

// Makes the complete checkpoint in `dir` visible under its final name. An existing directory of
// that name that this run wrote (manifest run_id == run_id) and that verifies (every file's
// checksum) is replaced; any other (damaged, or another run's) is moved aside to
// "<final>.aside-<unix time>" and kept, with a warning naming why.
Status commit_checkpoint(io::AtomicDirectory& dir, const std::string& run_id);
// Keeps the `keep` newest complete checkpoints of run `run_id` on the live lineage (whose branch
// is one of `live_branches`: the branch being trained and its ancestors) and removes the older
// ones. Checkpoints of other runs or other branches, and directories without a readable
// manifest, are left alone.
Status prune_checkpoints(const std::string& run_dir, int64_t keep, const std::string& run_id,
                         const std::vector<std::string>& live_branches);
// A rollback: moves every checkpoint of run_dir newer than `step` (the abandoned branch) into
// RUN_DIR/abandoned/<unix time>-after-<step>/, durably; nothing is deleted. Returns that
// directory ("" when nothing was newer).
StatusOr<std::string> archive_checkpoints_after(const std::string& run_dir, int64_t step);
// The newest checkpoint of run_dir on a branch that started from the checkpoint directory named
// `parent` (manifest parent), or "" when there is none.
std::string newest_checkpoint_branched_from(const std::string& run_dir, const std::string& parent);
// Start-up recovery (call under the run-directory lock, before anything reads the checkpoints):
// removes "*.trash" leftovers; completes an interrupted commit (a fully verified "ckpt-N.tmp"
// with no "ckpt-N" is renamed into place) and removes incomplete ".tmp" directories; restores or
// removes ".old" directories of earlier versions. Returns one line per action.
StatusOr<std::vector<std::string>> recover_checkpoints(const std::string& run_dir);

}  // namespace moe::ckpt
