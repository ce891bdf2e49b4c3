#include "core/train/memory_estimate.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "base/allocator.h"
#include "core/optim/state_sharding.h"
#include "core/train/model_size.h"

namespace moe {
namespace {

// First integer in a file ("max" or a missing file: -1).
int64_t read_int(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word)) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(word.c_str(), &end, 10);
  return *end == '\0' ? v : -1;
}

}  // namespace

std::string gib_text(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string MemoryEstimate::to_string() const {
  return str_cat(gib_text(total()), " GiB (parameters ", gib_text(parameter_bytes), ", gradients ",
                 gib_text(gradient_bytes), ", optimizer ", gib_text(optimizer_bytes),
                 ", activations ", gib_text(activation_bytes), " for a micro-batch of ",
                 micro_batch_tokens, " tokens",
                 recompute == Recompute::kNone
                     ? std::string()
                     : str_cat(" with ", recompute_name(recompute), " recomputation"),
                 ")");
}

std::string MemoryEstimate::scratch_to_string() const {
  std::string out =
      str_cat("the activations include ", gib_text(logits_scratch_bytes + device_scratch_bytes),
              " GiB of scratch: the step's largest transient, the head's f32 logits "
              "and their gradient");
  if (device_scratch_bytes > 0) {
    out += str_cat(" (", gib_text(logits_scratch_bytes),
                   "), and the GPU's attention scores and cuBLAS workspace (",
                   gib_text(device_scratch_bytes), ")");
  }
  if (dropless_worst_rows == 0) return out;
  if (dropless_worst_rows == dropless_balanced_rows) {
    return out + str_cat("; dropless worst case: as estimated (this rank's experts receive all ",
                         dropless_balanced_rows, " rows per layer however the tokens route)");
  }
  return out + str_cat("; dropless worst case: activations ",
                       gib_text(activation_bytes + dropless_worst_extra_bytes), " GiB (",
                       gib_text(total() + dropless_worst_extra_bytes),
                       " GiB in all) if every token of the EP group's micro-batch chose experts "
                       "of one rank (",
                       dropless_worst_rows, " rows received per layer instead of ",
                       dropless_balanced_rows, ")");
}

namespace {

// The parameters a rank holds, as the layers register them, and those that are GEMM operands
// (`matmul`: a working copy under BF16).
struct ParameterCount {
  int64_t params = 0, matmul = 0;
  int64_t experts = 0;        // of params, the expert shards' (ParamKind::kExpert)
  int64_t expert_matmul = 0;  // of matmul, the expert shards'
};

ParameterCount count_parameters(const ModelConfig& m, int ep) {
  const int64_t D = m.d_model, V = m.vocab_size, S = m.seq_len;
  const bool post = m.block_style == BlockStyle::kPostLnDoubleResidual;
  const int64_t positions = m.position == PositionKind::kLearned ? S * D : 0;  // none under RoPE
  const int64_t attention_biases = m.linear_bias ? 4 * D : 0;
  int64_t params = positions + V * D, matmul = V * D;  // positions, token embedding
  int64_t experts = 0, experts_matmul = 0;
  if (!m.tie_embeddings) params += V * D, matmul += V * D;
  // Each norm's parameters: gamma, and LayerNorm's beta.
  const int64_t norm = m.norm == NormKind::kRmsNorm ? D : 2 * D;
  if (!post) params += norm;  // final norm
  for (const BlockPlan& b : m.blocks) {
    params += 4 * D * D + attention_biases + 2 * norm;  // attention (qkv, o, biases), ln1, ln2
    matmul += 4 * D * D;
    if (!b.moe) {
      const FfnParams ffn = ffn_params(D, m.d_ff, m.activation, m.linear_bias);
      params += ffn.total();
      matmul += ffn.matrices;
      continue;
    }
    const MoeLayerConfig& c = b.moe_cfg;
    const int64_t local = c.num_experts / ep;
    if (post) params += norm;                                           // ln_in
    params += D * c.num_experts + (c.linear_bias ? c.num_experts : 0);  // the router
    if (c.bias_update_rate > 0) params += c.num_experts;  // loss-free balancing's bias
    const FfnParams expert = ffn_params(D, c.d_expert, c.activation, c.linear_bias);
    params += local * expert.total();
    matmul += local * expert.matrices;
    experts += local * expert.total();
    experts_matmul += local * expert.matrices;
    if (c.sparsemixer.enabled && c.sparsemixer.omega) params += D;
    if (c.shared_experts > 0) {
      const FfnParams shared = ffn_params(D, c.shared_width(), c.activation, c.linear_bias);
      params += shared.total();
      matmul += shared.matrices;
    }
  }
  return {params, matmul, experts, experts_matmul};
}

// The distributed optimizer (core/optim/state_sharding.h): the state of one chunk per kind, and
// arenas padded to a whole number of chunks (the masters' and the gradients' alike). With
// `shard_masters` (BF16) a sharded kind keeps one chunk of masters instead of its padded arena,
// and the F values of its parameters that are not GEMM operands.
void shard_optimizer_bytes(const ParameterCount& count, int world_size, int ep, int slots,
                           bool shard_masters, MemoryEstimate* e) {
  struct Kind {
    int64_t numel, matmul;
    int ranks;
  };
  const Kind kinds[] = {
      {count.params - count.experts, count.matmul - count.expert_matmul, world_size},
      {count.experts, count.expert_matmul, std::max(1, world_size / ep)}};
  e->optimizer_bytes = 0;
  for (const Kind& k : kinds) {
    const int64_t chunk = shard_chunk(k.numel, k.ranks);
    const int64_t padding = k.ranks * chunk - k.numel;
    e->optimizer_bytes += 4 * slots * chunk;
    e->gradient_bytes += 4 * padding;
    if (shard_masters && k.ranks > 1 && k.numel > 0) {
      e->parameter_bytes += 4 * (chunk - k.numel) + 4 * (k.numel - k.matmul);
    } else {
      e->parameter_bytes += 4 * padding;
    }
  }
}

// Activation bytes per token of one block, by what each recompute setting keeps of it.
struct BlockBytes {
  double saved = 0;   // what the block keeps for backward (NONE), its hidden rows included
  double hidden = 0;  // of `saved`: the FFN's or experts' hidden rows (SELECTIVE recomputes them)
  double input = 0;   // FULL: the block's input and the MoE state entering it
  // What its backward holds at once beyond the step's few [T, D] gradients: the gradients of the
  // expert rows (dy, dx) and of the hidden rows (dh, dh_pre). Under NONE and SELECTIVE every
  // other block's saved tensors cover it; under FULL only the replayed block's are there.
  double backward = 0;
};

// One block's bytes per token (inputs a layer reuses are shared, not copied). A: bytes per
// activation. state_in: the block is entered by a MoE layer's state (FULL keeps it).
BlockBytes block_bytes(const ModelConfig& m, const BlockPlan& b, int64_t A, bool state_in) {
  const int64_t D = m.d_model, H = m.n_heads;
  BlockBytes out;
  out.input = D * A + (state_in ? 4.0 * D + 4 : 0.0);  // h; the state p (F) and top1 (i32)
  out.saved = 8.0 * D * A + 4.0 * H + 16;  // qkv, context, output, dropout, sum, LN; lse, stats
  if (!b.moe) {
    // h_pre ([F], or [2F] when gated) and h.
    out.hidden = (first_matrix_cols(m.activation, m.d_ff) + m.d_ff) * A;
    out.saved += out.hidden + 4.0 * D * A + 8;
    out.backward = out.hidden;
    return out;
  }
  const MoeLayerConfig& c = b.moe_cfg;
  // Rows an expert block holds per token: K assignments, padded to the capacity in capacity
  // mode (C = capacity_factor * T * K / E per expert) or by one row per block in dropless.
  const double rows = c.top_k * (c.dropless ? 1.0 : std::max(1.0, c.capacity_factor));
  // x and y in and out of the experts; h_pre ([F], or [2F] when gated) and h
  out.hidden = rows * (first_matrix_cols(c.activation, c.d_expert) + c.d_expert) * A;
  out.saved += rows * 4.0 * D * A + out.hidden;
  out.backward = rows * 2.0 * D * A + out.hidden;
  out.saved += 4.0 * D + 3.0 * c.num_experts * 4 + 12.0 * c.top_k;  // router in, logits, probs, idx
  out.saved += 6.0 * D * A + 4.0 * D * 4;  // u, out, LNs, sums; state p (F)
  if (c.shared_experts > 0) {              // the shared experts' h_pre, h and output
    const double shared =
        (first_matrix_cols(c.activation, c.shared_width()) + c.shared_width()) * A;
    out.hidden += shared;
    out.saved += shared + D * A;
  }
  if (c.residual == ResidualKind::kAdam) out.saved += 4.0 * D * 4;
  return out;
}

// Activation bytes per token of one micro-batch: what the blocks keep for backward under
// `recompute`, the embedding's output and the head's input; not the head's logits and their
// gradient (counted whole: estimate_training_memory).
double activation_bytes_per_token(const ModelConfig& m, int64_t A, Recompute recompute) {
  const int64_t D = m.d_model;
  double per_token = 2.0 * D * A + 8;  // embedding output and its dropout
  double kept = 0, largest_hidden = 0, largest_replay = 0;
  bool state_in = false;
  for (const BlockPlan& b : m.blocks) {
    const BlockBytes bytes = block_bytes(m, b, A, state_in);
    state_in = state_in || b.moe;
    largest_hidden = std::max(largest_hidden, bytes.hidden);
    largest_replay = std::max(largest_replay, bytes.saved + bytes.backward);
    switch (recompute) {
      case Recompute::kNone:
        kept += bytes.saved;
        break;
      case Recompute::kSelective:
        kept += bytes.saved - bytes.hidden;
        break;
      case Recompute::kFull:
        kept += bytes.input;
        break;
    }
  }
  // The block whose backward runs: its hidden rows recomputed, or its whole forward replayed
  // (with its backward's gradients).
  if (recompute == Recompute::kSelective) kept += largest_hidden;
  if (recompute == Recompute::kFull) kept += largest_replay;
  per_token += kept;
  per_token += 2.0 * D * A + 8;  // final hidden, lse (the logits and d_logits: the caller)
  // Backward holds a few [T, D] gradients at once on top of the saved activations.
  per_token += 6.0 * D * 4;
  return per_token;
}

// Dropless routing's worst case per MoE layer (memory_estimate.h): fills the rows and the extra
// activation bytes of `tokens` tokens per rank into e. The balanced count above holds, per
// assignment, the received input and output ([D] each) and the hidden states (h_pre, h) on the
// expert's rank; those grow with the rows received, the sender's own send and return rows do not.
// Which layers keep them follows e->recompute.
void add_dropless_worst_case(const ModelConfig& m, int64_t A, int ep, int64_t tokens,
                             MemoryEstimate* e) {
  const int64_t D = m.d_model;
  int64_t rows_bytes = 0, largest_hidden = 0, largest_rows = 0;
  for (const BlockPlan& b : m.blocks) {
    if (!b.moe || !b.moe_cfg.dropless) continue;
    const MoeLayerConfig& c = b.moe_cfg;
    const int64_t balanced = tokens * c.top_k;
    const int64_t worst = ep * tokens * std::min<int64_t>(c.top_k, c.num_experts / ep);
    const int64_t extra = std::max<int64_t>(0, worst - balanced);
    const int64_t hidden = extra * (first_matrix_cols(c.activation, c.d_expert) + c.d_expert) * A;
    e->dropless_balanced_rows = std::max(e->dropless_balanced_rows, balanced);
    e->dropless_worst_rows = std::max(e->dropless_worst_rows, worst);
    rows_bytes += extra * 2 * D * A;
    largest_hidden = std::max(largest_hidden, hidden);
    largest_rows = std::max(largest_rows, extra * 2 * D * A + hidden);
    if (e->recompute == Recompute::kNone)
      e->dropless_worst_extra_bytes += extra * 2 * D * A + hidden;
  }
  if (e->recompute == Recompute::kSelective) {
    e->dropless_worst_extra_bytes = rows_bytes + largest_hidden;
  }
  if (e->recompute == Recompute::kFull) e->dropless_worst_extra_bytes = largest_rows;
}

}  // namespace

MemoryEstimate estimate_training_memory(const RunConfig& cfg, int world_size) {
  const ModelConfig& m = cfg.model;
  const TrainConfig& t = cfg.train;
  const int64_t A = t.precision == Precision::kBf16 ? 2 : 4;  // activation bytes
  const ParameterCount count = count_parameters(m, std::max(1, cfg.parallel.ep));
  const int64_t params = count.params, matmul = count.matmul;
  MemoryEstimate e;
  e.parameters = params;
  e.parameter_bytes = 4 * params + (A == 2 ? 2 * matmul : 0);
  e.gradient_bytes = 4 * params;
  const int slots =
      t.optimizer.kind == OptimizerKind::kAdamW ? 2 : (t.optimizer.momentum > 0 ? 1 : 0);
  e.optimizer_bytes = 4 * params * slots;
  if (t.distributed_optimizer && world_size > 1) {
    shard_optimizer_bytes(count, world_size, std::max(1, cfg.parallel.ep), slots, A == 2, &e);
  }

  // Activations of one micro-batch.
  const int64_t micro = t.micro_batch_per_rank(world_size);
  const int64_t tokens = micro * m.seq_len;
  e.recompute = t.recompute;
  const double per_token = activation_bytes_per_token(m, A, t.recompute);
  e.micro_batch_tokens = tokens;
  // The head's f32 logits and their gradient ([tokens, V] each) coexist from the start of
  // backward on, the step's largest transient; the host allocator hands each out as a whole
  // bucket (base/allocator.h: up to 1/8 more), which at a large vocabulary is no rounding error.
  const int64_t logits = m.vocab_size * 4 * tokens;
  e.logits_scratch_bytes =
      2 * (t.device == DeviceKind::kCpu
               ? static_cast<int64_t>(allocator_bucket_size(static_cast<size_t>(logits)))
               : logits);
  e.activation_bytes = static_cast<int64_t>(std::ceil(per_token * static_cast<double>(tokens))) +
                       e.logits_scratch_bytes;
  add_dropless_worst_case(m, A, std::max(1, cfg.parallel.ep), tokens, &e);
  return e;
}

int64_t available_host_memory() {
  int64_t available = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") {
      available = kb * 1024;
      break;
    }
  }
  // cgroup v2: the process's group limit.
  const int64_t max = read_int("/sys/fs/cgroup/memory.max");
  const int64_t current = read_int("/sys/fs/cgroup/memory.current");
  if (max > 0 && current >= 0) {
    const int64_t left = std::max<int64_t>(0, max - current);
    available = available < 0 ? left : std::min(available, left);
  }
  return available;
}

Status check_memory(const MemoryEstimate& estimate, int64_t available, const std::string& where,
                    const std::string& fitting) {
  if (available < 0 || estimate.total() <= available) return Status::OK();
  return invalid_argument_error("this run needs about ", estimate.to_string(), " per rank, but ",
                                where, " has ", gib_text(available), " GiB available", fitting,
                                "; else lower train.batch_size (or raise train.grad_accum), "
                                "shorten model.seq_len, or run on more ranks");
}

}  // namespace moe
