// Where a run computes, chosen once from train.device: the only place core/ looks at the device.
// The CPU: a host Context with the run's threads, the BLAS loaded (its kernel chosen from the
// CPU's features, kernels/cpu/blas_library.h). CUDA: a Context on this rank's node-local GPU
// (choose_cuda_device; momoe-launch narrows CUDA_VISIBLE_DEVICES to it). Everything after this
// hands tensors to kernels through the Context and never asks which one it got.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/context.h"
#include "types/run_config.h"

namespace moe {

struct RunDevice {
  std::unique_ptr<Context> ctx;
  // For the start-up line: "the CPU (2 thread(s) per rank)", "cuda:0 (NVIDIA H100 80GB HBM3)".
  std::string description;
  // The memory the run's estimate is checked against: what this device can still allocate
  // (-1: unknown), and a key naming the memory pool; ranks with the same key share it (host name
  // for the CPU, host name and PCI bus id for a GPU).
  int64_t available_bytes = -1;
  std::string memory_key;
  std::string memory_name;  // "host NAME", "cuda:0 (NVIDIA H100 80GB HBM3 at 0000:19:00.0)"
};

// `host_options` are used for the CPU; `rank` picks the GPU when no launcher variable gives the
// node-local rank (ranks that are threads of one process).
StatusOr<RunDevice> make_run_device(DeviceKind kind, const ContextOptions& host_options, int rank);

// Device memory a step needs beyond estimate_training_memory (which counts what the CPU holds):
// the CUDA attention's score scratch, 12 bytes per B*H*S*S score on either GEMM path (the f32
// path's backward holds p and dP in f32, the gemm-bf16 path's s and dP in f32 with P m and dS in
// bf16), or the fused kernels' B*H*S row sums instead, and the cuBLAS workspace. 0 on the CPU.
int64_t device_scratch_bytes(const RunConfig& cfg, int world_size);

}  // namespace moe
