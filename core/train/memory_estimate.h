// How much memory one rank's training step needs, from the config alone (before anything is
// allocated), and how much the machine has: the trainer refuses a run that cannot fit instead of
// growing until the kernel kills it.
//
// The estimate counts the parameters (fp32 masters, gradients, optimizer state, bf16 working
// copies of the GEMM weights under BF16; under train.distributed_optimizer the state of this
// rank's chunks and the arenas' padding, and under BF16 the masters of this rank's chunks and the
// fp32 values of the other parameters, core/optim/state_sharding.h), and one micro-batch's
// activations: the tensors the layers keep for backward as train.recompute keeps them (NONE every
// block's saved tensors; SELECTIVE those less the FFNs' and experts' hidden rows; FULL each
// block's input and the MoE state entering it), plus the larger of the step's two transients,
// which never coexist: the head's logits and their gradient (as train.loss_chunk_tokens cuts
// them) and the backward of the first block to run it (its gradients, and the hidden rows
// SELECTIVE recomputes or the block FULL replays). Each tensor counts as the allocator holds it
// (on the CPU a whole bucket of the host allocator, base/allocator.h), so the estimate is the
// parameters' allocation exactly. tests/core/memory_estimate_test.cc holds the total against the
// tensor allocator's measured peak: at or above it for every config family at test size (one
// rank), each recompute setting, both precisions; and within 10% above it on the quick start and
// the smoe-medium preset at each setting, the loss whole and chunked, at EP 2 and with the
// distributed optimizer. What the tensor allocator does not see is not in that peak: the f32
// copies a CPU bf16 product makes (counted for the head, the largest), the Local backend's
// result vectors and the MPI backend's staging scratch (up to 32 MiB per communicator).
#pragma once

#include <cstdint>
#include <string>

#include "types/run_config.h"

namespace moe {

// Bytes as GiB with two decimals ("2.41"), as every memory line prints them.
std::string gib_text(int64_t bytes);

struct MemoryEstimate {
  int64_t parameters = 0;       // per rank: elements (dense + this rank's experts)
  int64_t parameter_bytes = 0;  // masters and working copies
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activation_bytes = 0;  // one micro-batch, kept as `recompute` keeps it
  Recompute recompute = Recompute::kNone;
  int64_t total() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + activation_bytes;
  }
  // "2.41 GiB (parameters 0.10, gradients 0.05, optimizer 0.10, activations 2.16 for a
  // micro-batch of 4096 tokens)"; under SELECTIVE or FULL "... 4096 tokens with FULL
  // recomputation)"
  std::string to_string() const;
  int64_t micro_batch_tokens = 0;

  // Of activation_bytes: the step's largest transient, the head's f32 logits ([tokens, V]; one
  // loss chunk's rows when recomputed) and one chunk's gradient (written over the logits under
  // FP32; train.loss_chunk_tokens), on the CPU as the host allocator's buckets hold them.
  int64_t logits_scratch_bytes = 0;
  // Beside it, never at once (backward frees the logits first): the largest transient of a
  // block's backward. activation_bytes holds the larger of the two.
  int64_t backward_scratch_bytes = 0;
  // Of activation_bytes, on a GPU: the device's own scratch (attention scores, the cuBLAS
  // workspace: run_device.h device_scratch_bytes), added by the trainer; 0 on the CPU.
  int64_t device_scratch_bytes = 0;
  // Dropless routing's worst case (0 rows without a dropless MoE layer). The activations count
  // T x K received expert rows per rank and dropless layer (balanced routing; T: the rank's
  // micro-batch tokens); if every token of the EP group's micro-batch chose experts of one rank,
  // that rank receives ep x T x min(K, E_l) rows (E_l: its experts). dropless_*_rows: the largest
  // over the dropless layers; dropless_worst_extra_bytes: the activation bytes the extra rows add
  // (each row's received input, expert hidden states and output), summed over the layers that
  // keep them (SELECTIVE: the hidden states of one layer only; FULL: one layer's rows only).
  int64_t dropless_balanced_rows = 0, dropless_worst_rows = 0;
  int64_t dropless_worst_extra_bytes = 0;
  // "the activations include 0.08 GiB of scratch: the step's largest transient, ...", and with
  // a dropless layer "; dropless worst case: activations 0.40 GiB (0.45 GiB in all) if ..."
  std::string scratch_to_string() const;
};

// cfg.model.vocab_size must be set. world_size: the ranks the batch is split over.
MemoryEstimate estimate_training_memory(const RunConfig& cfg, int world_size);

// Bytes this process can still allocate on the host: MemAvailable from /proc/meminfo, lowered
// to the cgroup's remaining allowance (memory.max - memory.current) when one is set. -1 when
// unknown.
int64_t available_host_memory();

// kInvalidArgument naming the estimate, the memory available and what to change, when the
// estimate exceeds `available` (-1: unknown, never refused). `fitting`: the settings that would
// fit (memory_advice.h fitting_settings_text), added to the message.
Status check_memory(const MemoryEstimate& estimate, int64_t available, const std::string& where,
                    const std::string& fitting = "");

}  // namespace moe
