// GPU tests (label gpu): without a CUDA device they skip, so the CPU CI stays green; where a GPU
// is required (MOMOE_REQUIRE_GPU=1, which tests/run_gpu.sh sets) zero devices is a failure that
// names the CUDA runtime's reason: a driver too old for this CUDA also reports zero devices, and
// a GPU session must not read "all skipped" as "all passed".
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "base/device.h"

namespace moe::testing {

inline bool gpu_required() {
  const char* v = std::getenv("MOMOE_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace moe::testing

// In a TEST body or SetUp(): returns from it (skipped, or failed when a GPU is required) unless a
// CUDA device is visible.
#define MOE_REQUIRE_CUDA_DEVICE()                                                               \
  do {                                                                                          \
    if (::moe::cuda_device_count() == 0) {                                                      \
      if (::moe::testing::gpu_required()) {                                                     \
        FAIL() << "MOMOE_REQUIRE_GPU=1 but no CUDA device is usable: "                          \
               << ::moe::cuda_unavailable_reason();                                             \
      }                                                                                         \
      GTEST_SKIP() << "no CUDA device is visible (" << ::moe::cuda_unavailable_reason() << ")"; \
    }                                                                                           \
  } while (0)
