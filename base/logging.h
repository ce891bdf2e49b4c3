// Rank-aware logging to stderr: "[momoe r3 I 12:00:01] message". The rank and level are set once
// at start-up by the launcher (before any thread starts); library code only calls the log
// functions. Informational messages go to every rank unless the *_rank0 variant is used.
#pragma once

#include <string>

#include "base/status.h"

namespace moe {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void set_log_rank(int rank);
void set_log_level(LogLevel level);
int log_rank();
// Parses "debug" | "info" | "warning" | "error".
StatusOr<LogLevel> parse_log_level(const std::string& name);

void log_message(LogLevel level, bool rank0_only, const std::string& message);

template <typename... Args>
void log_info(const Args&... args) {
  log_message(LogLevel::kInfo, false, str_cat(args...));
}
template <typename... Args>
void log_info_rank0(const Args&... args) {
  log_message(LogLevel::kInfo, true, str_cat(args...));
}
template <typename... Args>
void log_warning(const Args&... args) {
  log_message(LogLevel::kWarning, false, str_cat(args...));
}
template <typename... Args>
void log_error(const Args&... args) {
  log_message(LogLevel::kError, false, str_cat(args...));
}
template <typename... Args>
void log_debug(const Args&... args) {
  log_message(LogLevel::kDebug, false, str_cat(args...));
}

}  // namespace moe
