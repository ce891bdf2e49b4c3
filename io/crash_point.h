// Fault injection for the crash-safety tests. Every rename and unlink of the crash-safe file code
// (file_util.h, the checkpoint commit and pruning) passes a crash point first. After
// set_crash_at(n), the n-th crash point this process reaches (1-based) kills it with SIGKILL, as
// `kill -9` or a power cut would; a test loops n over every point of an operation to prove that
// the on-disk state is recoverable at each instant. Off (0) by default; the executables set it
// from MOMOE_CRASH_AT (launcher/env_params.h).
#pragma once

#include <cstdint>
#include <string_view>

namespace moe::io {

void set_crash_at(int64_t n);  // 0: never
// Prints "momoe crash point N: <what>" to stderr at every point (to count an operation's points).
void set_crash_trace(bool on);
void crash_point(std::string_view what);

}  // namespace moe::io
