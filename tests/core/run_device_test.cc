// The device memory a GPU step needs beyond the CPU's estimate (run_device.h): the GEMM paths'
// 12 bytes per score (B x H x S x S: the f32 path's p and dP, or the bf16 path's f32 s and dP
// beside bf16 P m and dS) and cuBLAS's workspace, or with the fused attention (bf16, heads of at
// most 128 columns: the default) its B x H x S row sums instead; nothing on the CPU.
// Plain arithmetic on the config: no GPU needed.
#include "core/train/run_device.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/context.h"
#include "proto/run_convert.h"
#include "tests/testing/scoped_env.h"

namespace moe {
namespace {

// The quick start at S 256, 8 heads of 16, 4 sequences a rank, on `device` in `precision`.
RunConfig config(const std::string& device, const std::string& precision) {
  const std::vector<std::string> set = {"model.seq_len=256", "model.n_heads=8",
                                        "train.batch_size=4", "train.device=" + device,
                                        "train.precision=" + precision};
  StatusOr<RunConfig> cfg =
      load_run_config(std::string(MOE_SOURCE_DIR) + "/configs/quickstart.pbtxt", set, 0);
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  return cfg.ok() ? *cfg : RunConfig{};
}

TEST(DeviceScratchTest, TheFusedAttentionNeedsRowSumsNotScores) {
  // cuBLAS's workspace: the one each CUDA context makes (32 MiB).
  const int64_t workspace = static_cast<int64_t>(Context::kCublasWorkspaceBytes);
  ASSERT_EQ(workspace, int64_t{32} << 20);
  const int64_t B = 4, H = 8, S = 256;
  const int64_t scores = 3 * B * H * S * S * 4, row_sums = B * H * S * 4;
  EXPECT_EQ(device_scratch_bytes(config("CPU", "BF16"), 1), 0);
  {
    const testing::ScopedEnv gemm("MOMOE_ATTENTION", "gemm");
    EXPECT_EQ(device_scratch_bytes(config("CUDA", "BF16"), 1), scores + workspace);
  }
  {
    // The GEMM path on bf16 operands: the same 12 bytes per score.
    const testing::ScopedEnv gemm_bf16("MOMOE_ATTENTION", "gemm-bf16");
    EXPECT_EQ(device_scratch_bytes(config("CUDA", "BF16"), 1), scores + workspace);
  }
  {
    // The default for bf16 heads of at most 128 columns: the fused kernels.
    const testing::ScopedEnv unset("MOMOE_ATTENTION", nullptr);
    EXPECT_EQ(device_scratch_bytes(config("CUDA", "BF16"), 1), row_sums + workspace);
  }
  const testing::ScopedEnv fused("MOMOE_ATTENTION", "fused");
  // FP32 keeps the GEMM path; BF16 takes the fused kernels.
  EXPECT_EQ(device_scratch_bytes(config("CUDA", "FP32"), 1), scores + workspace);
  EXPECT_EQ(device_scratch_bytes(config("CUDA", "BF16"), 1), row_sums + workspace);
  // Two ranks of data parallelism halve each rank's micro-batch.
  EXPECT_EQ(device_scratch_bytes(config("CUDA", "FP32"), 2), scores / 2 + workspace);
}

}  // namespace
}  // namespace moe
