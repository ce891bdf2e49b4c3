#include "base/progress.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace moe {

std::string format_percent(double fraction) {
  if (!std::isfinite(fraction)) return "?";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", 100.0 * fraction);
  return buf;
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e9) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  std::ostringstream os;
  if (s >= 3600) os << s / 3600 << "h";
  if (s >= 60) os << (s / 60) % 60 << "m";
  os << s % 60 << "s";
  return os.str();
}

double progress_interval_seconds(double fallback) {
  const char* env = std::getenv("MOMOE_PROGRESS_SECONDS");
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  return end != env && *end == '\0' && v >= 0 ? v : fallback;
}

}  // namespace moe
