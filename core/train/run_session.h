// The run session of one job: everything about a run directory that is not training itself.
//   - the directory: rank 0 holds RUN_DIR/lock (run_directory.h), recovers what a crash
//     interrupted (ckpt::recover_checkpoints) and, for --fresh, moves an earlier run aside;
//   - the resume choice: the newest checkpoint or the one named (a rollback's command rerun
//     continues the branch it started), after listing every config field (and corpus split) that
//     changed since it; a change to what training computes is refused unless allowed;
//   - the lineage written into every manifest: the run id, the branch being trained, the
//     checkpoint it started from and its ancestor branches; resuming from an older checkpoint of
//     the directory rolls back (the newer ones are archived, never deleted).
// Rank 0 decides; each collective call makes every rank learn the verdict.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/data/corpus.h"
#include "core/train/coordinator.h"
#include "core/train/run_directory.h"
#include "types/checkpoint_manifest.h"
#include "types/run_config.h"

namespace moe {

struct SessionOptions {
  std::string run_dir;
  bool resume = true;                // false (--fresh): archive an earlier run and start anew
  std::string resume_from;           // a checkpoint to resume from instead of the newest
  bool allow_config_change = false;  // resume even when the config changes the training
  std::FILE* progress = stdout;      // rank 0's notes (nullptr: silent)
};

// The lineage being trained (proto/checkpoint.proto), known on rank 0.
struct Lineage {
  std::string run_id;  // pruning removes only this run's checkpoints
  std::string branch;
  std::string parent;  // the checkpoint the branch started from ("" for the first branch)
  std::vector<std::string> ancestors;  // the branches before it
};

// Content fingerprints of the corpus splits ("data.train contents" -> "N tokens, fingerprint
// H"): written into every manifest and compared on resume, so that the same path with other
// contents is a change.
std::map<std::string, std::string> corpus_fingerprints(const data::TokenizedCorpus& corpus);

class RunSession {
 public:
  // Creates the run directory (rank 0 first); rank 0 takes it (lock, crash recovery, --fresh
  // archiving). Collective over world (nullable).
  static StatusOr<std::unique_ptr<RunSession>> open(const SessionOptions& opts,
                                                    comm::Communicator* world);

  // The checkpoint to resume from ("" for a fresh start or without opts.resume), chosen by rank
  // 0 after checking the changes of `cfg` (resolved) and `fingerprints` against it; broadcast.
  // Collective.
  StatusOr<std::string> choose_resume(const RunConfig& cfg,
                                      const std::map<std::string, std::string>& fingerprints);

  // After restoring `resume` ("" for none): a checkpoint of this directory continues its run,
  // and its branch when it is the newest, else rolls back (the newer checkpoints archived, a new
  // branch started, the coordinator told); anything else starts a new run. Collective.
  Status start_lineage(const std::string& resume, Coordinator* coordinator);
  const Lineage& lineage() const { return lineage_; }

  // Rank 0's note on the progress stream ("momoe: " + line).
  void say(const std::string& line) const;
  // For a run refused before training: removes the run directory (whatever it holds, the token
  // cache included) when open() created it on this rank, with the parents it created that are
  // still empty; a directory that existed before is left alone. The lock is released first.
  void discard_created_directory();

 private:
  RunSession(const SessionOptions& opts, comm::Communicator* world) : opts_(opts), world_(world) {}
  bool leader() const { return world_ == nullptr || world_->rank() == 0; }
  // Creates the run directory and its missing parents, noting them (created_).
  Status create_run_directory();
  Status take_run_directory();  // rank 0
  // Rank 0, resuming with no checkpoint named: when the directory has statistics but no
  // checkpoint (a run killed before its first save), moves them to archive/ and says that this
  // run starts over and why.
  Status start_over_without_checkpoint();
  StatusOr<std::string> pick_checkpoint(const RunConfig& cfg,
                                        const std::map<std::string, std::string>& fingerprints);
  Status check_config_change(const std::string& checkpoint, const RunConfig& cfg,
                             const std::map<std::string, std::string>& fingerprints);
  Status follow_lineage(const std::string& resume, const CheckpointManifestInfo& m,
                        Coordinator* coordinator);

  SessionOptions opts_;
  comm::Communicator* world_;
  std::optional<RunDirectoryLock> lock_;  // rank 0
  // The directories this rank created: the run directory, then its new parents upwards.
  std::vector<std::string> created_;
  Lineage lineage_;
};

}  // namespace moe
