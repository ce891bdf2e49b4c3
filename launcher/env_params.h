// Every MOMOE_* environment variable the executables read, with its default and meaning, in one
// place (NCCL_PARAM style). Library code reads none of these but MOMOE_DATA_DIR (in
// types/run_config.cc, to locate the bundled corpora) and MOMOE_HOST_NAME (base/device.h
// host_name(): the host a rank says it runs on, for tests and containers). The launcher also reads
// the variables MPI and Slurm set to describe the job (comm/world.cc, launcher/launch_main.cc).
// A value that does not parse is an error naming the variable, never a silent default.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "base/status.h"

namespace moe::env {

// An integer variable: `fallback` when unset or empty; kInvalidArgument when it is not an integer.
inline StatusOr<int64_t> int_param(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || errno == ERANGE) {
    return invalid_argument_error("environment variable ", name, "='", v, "' is not an integer");
  }
  return static_cast<int64_t>(x);
}

inline std::string string_param(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? fallback : std::string(v);
}

// Fault injection for the failure tests: the rank MOMOE_FAULT_RANK kills itself (SIGKILL) right
// after optimiser step MOMOE_FAULT_STEP (1-based) completes; with MOMOE_FAULT_STALL=1 it stops
// responding instead (sleeps for an hour), as a hung peer would. -1: off.
inline StatusOr<int64_t> fault_rank() { return int_param("MOMOE_FAULT_RANK", -1); }
inline StatusOr<int64_t> fault_step() { return int_param("MOMOE_FAULT_STEP", -1); }
inline StatusOr<int64_t> fault_stall() { return int_param("MOMOE_FAULT_STALL", 0); }
// Crash-safety tests (io/crash_point.h): kill the process at its N-th crash point (every
// rename and unlink of checkpoint and file code); MOMOE_CRASH_TRACE=1 prints each point. 0: off.
inline StatusOr<int64_t> crash_at() { return int_param("MOMOE_CRASH_AT", 0); }
inline StatusOr<int64_t> crash_trace() { return int_param("MOMOE_CRASH_TRACE", 0); }
// momoe-stats --plot: the plotting script (default: launcher/plot_stats.py of the source tree).
inline std::string plot_script() { return string_param("MOMOE_PLOT_SCRIPT", std::string()); }

}  // namespace moe::env
