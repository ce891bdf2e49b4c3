// Every MOMOE_* environment variable the executables read, with its default and meaning, in one
// place (NCCL_PARAM style). Library code reads none of these; core reads only MOMOE_DATA_DIR (in
// core/base/run_config.cc, to locate the bundled corpora). The launcher also reads the variables
// MPI and Slurm set to describe the job (launcher/world.cc, launcher/launch_main.cc).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace moe::env {

#define MOMOE_ENV_PARAM(getter, name, type, fallback, doc)        \
  /* doc */                                                       \
  inline type getter() {                                          \
    const char* v = std::getenv(name);                            \
    return v == nullptr || *v == '\0' ? (fallback) : parse_##type(v); \
  }

inline int64_t parse_int64_t(const char* v) { return std::strtoll(v, nullptr, 10); }
inline std::string parse_string(const char* v) { return v; }
using string = std::string;

// Fault injection for the failure tests: the rank MOMOE_FAULT_RANK kills itself (SIGKILL) right
// after optimiser step MOMOE_FAULT_STEP (1-based) completes. -1: off.
MOMOE_ENV_PARAM(fault_rank, "MOMOE_FAULT_RANK", int64_t, -1, "rank that kills itself")
MOMOE_ENV_PARAM(fault_step, "MOMOE_FAULT_STEP", int64_t, -1, "step after which it does")
// momoe-stats --plot: the plotting script (default: launcher/plot_stats.py of the source tree).
MOMOE_ENV_PARAM(plot_script, "MOMOE_PLOT_SCRIPT", string, std::string(), "plot_stats.py path")

#undef MOMOE_ENV_PARAM

}  // namespace moe::env
