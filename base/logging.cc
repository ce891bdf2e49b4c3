#include "base/logging.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace moe {
namespace {
std::atomic<int> g_rank{0};
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mutex;
}  // namespace

void set_log_rank(int rank) { g_rank = rank; }
void set_log_level(LogLevel level) { g_level = static_cast<int>(level); }
int log_rank() { return g_rank; }

StatusOr<LogLevel> parse_log_level(const std::string& name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warning") return LogLevel::kWarning;
  if (name == "error") return LogLevel::kError;
  return invalid_argument_error("log level '", name, "' is not one of debug, info, warning, error");
}

void log_message(LogLevel level, bool rank0_only, const std::string& message) {
  if (static_cast<int>(level) < g_level) return;
  if (rank0_only && g_rank != 0) return;
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  std::time_t now = std::time(nullptr);
  std::tm tm_now{};
  localtime_r(&now, &tm_now);
  char stamp[16];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm_now);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "[momoe r%d %c %s] %s\n", g_rank.load(), kLetters[static_cast<int>(level)],
               stamp, message.c_str());
  std::fflush(stderr);
}

}  // namespace moe
