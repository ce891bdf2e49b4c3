// A run directory belongs to one job at a time, and a new run never mixes with an old one.
//
// RunDirectoryLock: RUN_DIR/lock, held with flock(2) for the job's lifetime by rank 0, holding
// the holder's host, pid and start time. The kernel drops the lock when its holder dies, so a
// lock left by a crashed or killed job is recognised as stale and taken over (with a note); a
// live holder makes acquire() fail naming it. (flock works on local file systems and NFSv4.)
//
// archive_previous_run: what `--fresh` does with an earlier run's files: its checkpoints and
// stats.pb (and metrics.jsonl and the TensorBoard event files) are moved to
// RUN_DIR/archive/<date-time>/, never deleted and never mixed with the new run's. The token
// cache (content-addressed) stays.
#pragma once

#include <string>

#include "base/status.h"

namespace moe {

class RunDirectoryLock {
 public:
  // kFailedPrecondition naming the holder when another process holds the lock. *note receives a
  // line when a stale lock was taken over ("" otherwise).
  static StatusOr<RunDirectoryLock> acquire(const std::string& run_dir, std::string* note);
  RunDirectoryLock(RunDirectoryLock&& other) noexcept;
  RunDirectoryLock& operator=(RunDirectoryLock&& other) noexcept;
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;
  // Releases the lock and clears the holder line (a clean exit leaves no stale lock).
  ~RunDirectoryLock();

 private:
  RunDirectoryLock() = default;
  int fd_ = -1;
};

// Moves the checkpoints (ckpt-*, with any suffix) and stats.pb (and metrics.jsonl and the
// TensorBoard event files, events.out.tfevents.*) of run_dir into
// run_dir/archive/<YYYYmmdd-HHMMSS>/. Returns a line saying what moved ("moved the previous
// run's files (...) to DIR"), or "" when there was nothing to move.
StatusOr<std::string> archive_previous_run(const std::string& run_dir);

// A new random run id (16 hex digits).
std::string new_run_id();

}  // namespace moe
