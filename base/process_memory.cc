#include "base/process_memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moe {

int64_t resident_peak_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  int64_t bytes = -1;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) {  // "VmHWM:   123456 kB"
      bytes = std::strtoll(line + 6, nullptr, 10) * 1024;
      break;
    }
  }
  std::fclose(f);
  return bytes;
}

bool reset_resident_peak() {
  FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  const bool written = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && written;  // the kernel reports a refused write at the flush
}

}  // namespace moe
