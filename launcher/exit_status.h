// How the executables end. Exit codes (README "Exit codes"):
//   0  done;
//   1  failed (a system, I/O, communication or internal error; a damaged file);
//   2  the input must change: a bad flag, config, file or value, a refused resume (a changed
//      config, a checkpoint of another format), a run directory in use by another job, a damaged
//      prepared dataset (core/data/dataset.h reports it as kFailedPrecondition);
//   3  momoe-train stopped on a signal after writing a checkpoint: rerun the same command to
//      resume.
// On an error the Status is logged and a multi-rank job's communicator is aborted, so that no
// peer waits.
#pragma once

#include "base/logging.h"
#include "comm/communicator.h"

namespace moe {

inline constexpr int kExitFailed = 1;
inline constexpr int kExitUserError = 2;
inline constexpr int kExitStopped = 3;

inline int exit_code_of(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kFailedPrecondition:
      return kExitUserError;
    default:
      return kExitFailed;
  }
}

// Bad input (exit 2) is found by every rank alike (the trainer agrees on its set-up errors
// collectively), so no peer is left waiting and the job is not aborted: MPI_Abort would turn the
// exit code into 1. Any other error aborts a multi-rank job's communicator. A job-wide status
// (comm/agree.h: every rank holds the same one) is printed by rank 0 only (log_rank(): the
// world's rank, or the launcher's before the world exists), the other ranks logging it at
// debug level.
inline int exit_with(const Status& s, comm::Communicator* comm = nullptr) {
  if (s.job_wide() && log_rank() != 0) {
    log_debug(s.to_string());
  } else {
    log_error(s.to_string());
  }
  const int code = exit_code_of(s);
  if (comm != nullptr && comm->world_size() > 1 && code != kExitUserError) {
    comm->abort(s.message()).ignore_error();
  }
  return code;
}

// An error that every rank of a job finds alike before the world exists (a bad flag, a bad
// config: each rank reads the same ones): printed once, by rank 0 (log_rank(), the launcher's
// rank until the world exists), the other ranks logging it at debug level only (--log-level
// debug shows theirs, e.g. for a config file missing on one host only). Exits as exit_with.
inline int exit_with_job_wide(const Status& s) { return exit_with(s.as_job_wide()); }

}  // namespace moe
