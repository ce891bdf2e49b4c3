// base/process_memory.h: the resident high-water mark follows memory the process touches, and a
// reset lowers it to the resident size now where the kernel allows it (Linux 4.0 and later, no
// privileges needed); elsewhere the mark keeps running from the process's start.
#include "base/process_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>

namespace moe {
namespace {

constexpr size_t kBlock = size_t{64} << 20;

// 64 MiB mapped, touched page by page (resident), then unmapped (returned to the kernel at once,
// unlike a malloc'd block a heap may keep).
void touch_and_release() {
  void* p = mmap(nullptr, kBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  std::memset(p, 1, kBlock);
  munmap(p, kBlock);
}

TEST(ProcessMemoryTest, TheHighWaterMarkFollowsTouchedMemoryAndResets) {
  const int64_t before = resident_peak_bytes();
  ASSERT_GT(before, 0) << "VmHWM unreadable from /proc/self/status";
  touch_and_release();
  const int64_t peak = resident_peak_bytes();
  EXPECT_GE(peak, static_cast<int64_t>(kBlock));
  // The released block is gone from the resident set, but not from the mark until a reset.
  if (!reset_resident_peak()) {
    std::printf("note: /proc/self/clear_refs refused the reset: the mark runs from the start\n");
    EXPECT_EQ(resident_peak_bytes(), peak);
    return;
  }
  EXPECT_LE(resident_peak_bytes(), peak - static_cast<int64_t>(kBlock) / 2);
  touch_and_release();
  EXPECT_GE(resident_peak_bytes(), static_cast<int64_t>(kBlock));
}

}  // namespace
}  // namespace moe
