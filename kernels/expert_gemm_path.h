// How a GPU runs a group of dropless expert products (two or more blocks: kernels/gemm.h's
// expert_gemm and expert_gemm_wgrad), chosen by MOMOE_EXPERT_GEMM (read at every call, so that
// one process can time both paths):
//   kLoop (unset, empty or "loop"; the default): one cuBLAS call per block, which reaches
//     Hopper's own kernels (faster on every shape timed on an H200: benchmarks/gpu_notes.md);
//   kGrouped ("grouped"): one cublasGemmGroupedBatchedEx call per group where cuBLAS takes it
//     (it picked an sm80 kernel there), one by one where it refuses.
// Any other value is warned about once and means kLoop. The choice is the same in a build
// without CUDA (it names what a CUDA context would do). Inline: the CUDA kernels library reads
// it too, and links no host kernels.
#pragma once

#include <atomic>
#include <cstdlib>
#include <string>

#include "base/logging.h"

namespace moe::kernels {

enum class ExpertGemmPath { kLoop, kGrouped };

inline ExpertGemmPath expert_gemm_path() {
  const char* mode = std::getenv("MOMOE_EXPERT_GEMM");
  const std::string m = mode == nullptr ? "" : mode;
  if (m == "grouped") return ExpertGemmPath::kGrouped;
  if (!m.empty() && m != "loop") {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      log_warning("MOMOE_EXPERT_GEMM=", m, " is not one of loop, grouped: the expert products ",
                  "run one cuBLAS call per block");
    }
  }
  return ExpertGemmPath::kLoop;
}

// "loop" or "grouped", for reports.
inline const char* expert_gemm_path_name(ExpertGemmPath path) {
  return path == ExpertGemmPath::kGrouped ? "grouped" : "loop";
}

}  // namespace moe::kernels
