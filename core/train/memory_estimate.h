// How much memory one rank's training step needs, from the config alone (before anything is
// allocated), and how much the machine has: the trainer refuses a run that cannot fit instead of
// growing until the kernel kills it.
//
// The estimate counts the parameters (fp32 masters, gradients, optimizer state, bf16 working
// copies of the GEMM weights under BF16) exactly, and one micro-batch's activations from the
// tensors the layers keep for backward plus the largest transient of the step (the logits and
// their gradient), per token. tests/core/memory_estimate_test.cc holds it against the
// allocator's measured peak for every config family.
#pragma once

#include <cstdint>
#include <string>

#include "types/run_config.h"

namespace moe {

struct MemoryEstimate {
  int64_t parameters = 0;       // per rank: elements (dense + this rank's experts)
  int64_t parameter_bytes = 0;  // masters and working copies
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activation_bytes = 0;  // one micro-batch
  int64_t total() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + activation_bytes;
  }
  // "2.41 GiB (parameters 0.10, gradients 0.05, optimizer 0.10, activations 2.16 for 8 x 512
  // tokens)"
  std::string to_string() const;
  int64_t micro_batch_tokens = 0;
};

// cfg.model.vocab_size must be set. world_size: the ranks the batch is split over.
MemoryEstimate estimate_training_memory(const RunConfig& cfg, int world_size);

// Bytes this process can still allocate on the host: MemAvailable from /proc/meminfo, lowered
// to the cgroup's remaining allowance (memory.max - memory.current) when one is set. -1 when
// unknown.
int64_t available_host_memory();

// kInvalidArgument naming the estimate, the memory available and what to change, when the
// estimate exceeds `available` (-1: unknown, never refused).
Status check_memory(const MemoryEstimate& estimate, int64_t available, const std::string& where);

}  // namespace moe
