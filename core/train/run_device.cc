#include "core/train/run_device.h"

#include <algorithm>

#include "base/context.h"
#include "base/cpu_info.h"
#include "core/train/memory_estimate.h"
#include "kernels/attention.h"
#include "kernels/cpu/blas_library.h"

namespace moe {
StatusOr<RunDevice> make_run_device(DeviceKind kind, const ContextOptions& host_options, int rank) {
  RunDevice d;
  if (kind == DeviceKind::kCpu) {
    d.ctx = Context::host(host_options);
    MOE_RETURN_IF_ERROR(kernels::ref::load_blas());
    d.description = str_cat("the CPU (", d.ctx->threads(), " thread(s) per rank)");
    d.available_bytes = available_host_memory();
    d.memory_key = host_name();
    d.memory_name = str_cat("host ", d.memory_key);
    return d;
  }
  MOE_ASSIGN_OR_RETURN(const int device, choose_cuda_device(rank));
  MOE_ASSIGN_OR_RETURN(d.ctx, Context::cuda(device, host_options));
  // After the context exists: its own overhead is no longer free.
  MOE_ASSIGN_OR_RETURN(CudaDeviceInfo info, cuda_device_info(device));
  d.description =
      str_cat("cuda:", device, " (", info.name, ", sm_", info.sm_major, info.sm_minor, ")");
  d.available_bytes = info.free_bytes;
  d.memory_key = str_cat(host_name(), "/", info.pci_bus_id);
  d.memory_name = str_cat("cuda:", device, " (", info.name, " at ", info.pci_bus_id, ")");
  return d;
}

int64_t device_scratch_bytes(const RunConfig& cfg, int world_size) {
  if (cfg.train.device != DeviceKind::kCuda) return 0;
  const TrainConfig& t = cfg.train;
  const int64_t micro = t.micro_batch_per_rank(world_size);
  const int64_t S = cfg.model.seq_len, H = cfg.model.n_heads;
  // Scratch per score, estimated at 12 bytes for either GEMM path (FP32 and BF16 runs): the
  // bf16 path's backward holds s and dP in f32 beside P m and dS in bf16 (12 bytes), the f32
  // path's p and dP in f32 (8 bytes: over-estimated); the fused kernels hold only row sums.
  const bool fused =
      kernels::cuda_attention(activation_dtype(t.precision), cfg.model.d_model / H) ==
      kernels::CudaAttention::kFused;
  const int64_t attention_scratch = fused ? micro * H * S * 4 : 3 * micro * H * S * S * 4;
  const int64_t cublas_workspace = static_cast<int64_t>(Context::kCublasWorkspaceBytes);
  return attention_scratch + cublas_workspace;
}

}  // namespace moe
