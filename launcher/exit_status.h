// How the executables end on an error: the Status is logged, a multi-rank job's communicator is
// aborted (so that no peer waits), and the exit code says whether the user can fix the input
// (2: bad argument or missing file) or something failed (1).
#pragma once

#include "comm/communicator.h"
#include "core/base/logging.h"

namespace moe {

inline int exit_with(const Status& s, comm::Communicator* comm = nullptr) {
  log_error(s.to_string());
  if (comm != nullptr && comm->world_size() > 1) comm->abort(s.message()).ignore_error();
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
}

}  // namespace moe
