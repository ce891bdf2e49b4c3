#include "io/crash_point.h"

#include <atomic>
#include <csignal>
#include <cstdio>

namespace moe::io {
namespace {

std::atomic<int64_t> g_crash_at{0};
std::atomic<int64_t> g_reached{0};
std::atomic<bool> g_trace{false};

}  // namespace

void set_crash_at(int64_t n) { g_crash_at = n; }
void set_crash_trace(bool on) { g_trace = on; }

void crash_point(std::string_view what) {
  const int64_t n = ++g_reached;
  if (g_trace) {
    std::fprintf(stderr, "momoe crash point %lld: %.*s\n", static_cast<long long>(n),
                 static_cast<int>(what.size()), what.data());
    std::fflush(stderr);
  }
  if (n == g_crash_at.load()) {
    std::fprintf(stderr, "momoe: crash injected at point %lld (%.*s)\n", static_cast<long long>(n),
                 static_cast<int>(what.size()), what.data());
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

}  // namespace moe::io
