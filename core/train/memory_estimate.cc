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
  const int64_t scratch = std::max(logits_scratch_bytes, backward_scratch_bytes);
  std::string out =
      str_cat("the activations include ", gib_text(scratch + device_scratch_bytes),
              " GiB of scratch: the step's largest transient, ",
              logits_scratch_bytes >= backward_scratch_bytes
                  ? "the head's f32 logits and their gradient (fewer with train.loss_chunk_tokens)"
                  : "a block's backward (its gradients and recomputed rows; the head's logits need "
                    "less)");
  if (device_scratch_bytes > 0) {
    out += str_cat(" (", gib_text(scratch),
                   "), and the GPU's attention scratch and cuBLAS workspace (",
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

// `bytes` as an allocator holds them: a whole bucket of the host allocator on the CPU
// (base/allocator.h: up to 1/8 more), the bytes themselves on a GPU.
int64_t held(int64_t bytes, DeviceKind device) {
  if (device != DeviceKind::kCpu || bytes <= 0) return bytes;
  return static_cast<int64_t>(allocator_bucket_size(static_cast<size_t>(bytes)));
}

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
  // Attention biases; qk_norm's weights ([Dh] each for q and k).
  const int64_t attention_biases =
      (m.linear_bias ? 4 * D : 0) + (m.qk_norm ? 2 * (D / m.n_heads) : 0);
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
      params += shared.total() + (c.shared_expert_gate ? D : 0);  // w_gate [D, 1]
      matmul += shared.matrices + (c.shared_expert_gate ? D : 0);
    }
  }
  return {params, matmul, experts, experts_matmul};
}

// The persistent arenas, one per kind (dense, expert) and role, as the allocator holds them
// (whole buckets on the CPU): the masters, the gradients, each optimizer slot's state, and under
// BF16 one arena of working copies. Under the distributed optimizer (core/optim/state_sharding.h)
// a kind cut over R ranks keeps the state of one chunk per slot, its masters and gradients padded
// to R chunks; under BF16 its masters are this rank's chunk, and the parameters that compute in
// fp32 (norms, biases) keep whole values in an arena of their own.
void add_parameter_bytes(const ParameterCount& count, const TrainConfig& t, int world_size, int ep,
                         MemoryEstimate* e) {
  const bool bf16 = t.precision == Precision::kBf16;
  const bool sharded = t.distributed_optimizer && world_size > 1;
  const int slots =
      t.optimizer.kind == OptimizerKind::kAdamW ? 2 : (t.optimizer.momentum > 0 ? 1 : 0);
  struct Kind {
    int64_t numel, matmul;
    int ranks;
  };
  const Kind kinds[] = {
      {count.params - count.experts, count.matmul - count.expert_matmul, world_size},
      {count.experts, count.expert_matmul, std::max(1, world_size / ep)}};
  e->parameter_bytes = bf16 ? held(2 * count.matmul, t.device) : 0;  // the working copies
  for (const Kind& k : kinds) {
    const int ranks = sharded ? k.ranks : 1;
    const int64_t chunk = shard_chunk(k.numel, ranks);
    const int64_t arena = ranks * chunk;  // padded under the distributed optimizer
    e->optimizer_bytes += slots * held(4 * chunk, t.device);
    e->gradient_bytes += held(4 * arena, t.device);
    if (bf16 && ranks > 1 && k.numel > 0) {
      e->parameter_bytes += held(4 * chunk, t.device) + held(4 * (k.numel - k.matmul), t.device);
    } else {
      e->parameter_bytes += held(4 * arena, t.device);
    }
  }
}

// One micro-batch's tensors as the allocator holds them: `rows` rows per token of the
// micro-batch's `tokens`, each `width` elements of `elem` bytes, rounded up to the host
// allocator's bucket on the CPU (base/allocator.h: up to 1/8 more).
struct TensorSizer {
  int64_t tokens = 0;
  DeviceKind device = DeviceKind::kCpu;
  double operator()(double rows, double width, double elem) const {
    const auto bytes =
        static_cast<int64_t>(std::ceil(rows * static_cast<double>(tokens)) * width * elem);
    return static_cast<double>(held(bytes, device));
  }
};

// Bytes of one block of one micro-batch, by what each recompute setting keeps of it.
struct BlockBytes {
  double saved = 0;   // what the block keeps for backward (NONE), its hidden rows included
  double hidden = 0;  // of `saved`: the FFN's or experts' hidden rows (SELECTIVE recomputes them)
  double input = 0;   // FULL: the block's input and the MoE state entering it
  // What its backward holds at once beyond the step's few [T, D] gradients: the gradients of the
  // expert rows (dy, dx) and of the hidden rows (dh, dh_pre). Under NONE and SELECTIVE every
  // other block's saved tensors cover it; under FULL only the replayed block's are there.
  double backward = 0;
};

// The attention and norms of one block: its input, qkv [3D] and context, the norms' inputs
// (three: post-LN's ln_in, ln1, ln2) and statistics, the attention rows' logsumexp [H]; under
// qk_norm the q and k before it [2D] and their heads' rstd [2H].
double attention_bytes(const ModelConfig& m, int64_t A, const TensorSizer& t) {
  const int64_t D = m.d_model;
  const double qk_norm = m.qk_norm ? t(1, 2 * D, A) + t(1, 2 * m.n_heads, 4) : 0.0;
  return t(1, 3 * D, A) + 5 * t(1, D, A) + 6 * t(1, 1, 4) + t(1, m.n_heads, 4) + qk_norm;
}

// A MoE layer's kept tensors besides the attention's. Rows an expert block holds per token: K
// assignments, padded to the capacity in capacity mode (C = capacity_factor * T * K / E per
// expert) or by one row per block in dropless; each kept as received (x) and as returned
// (y_send), with the hidden rows h_pre ([F], or [2F] when gated) and h; the router's input (F),
// logits and probabilities [E], its choices, the plan's indices and keys, the layer's output u.
// Its backward holds the rows' gradients (dy, dx) and the hidden rows' (dh, dh_pre); over more
// than one EP rank each exchange copies the rows it moves, so dy and dx are held twice (as sent
// and as received).
void add_moe_bytes(const MoeLayerConfig& c, int64_t D, int64_t A, int ep, const TensorSizer& t,
                   BlockBytes* out) {
  const double rows = c.top_k * (c.dropless ? 1.0 : std::max(1.0, c.capacity_factor));
  const double hidden =
      t(rows, first_matrix_cols(c.activation, c.d_expert), A) + t(rows, c.d_expert, A);
  out->hidden = hidden;
  out->saved += 2 * t(rows, D, A) + hidden;
  out->backward = (ep > 1 ? 4 : 2) * t(rows, D, A) + hidden;
  out->saved += t(1, D, 4) + 2 * t(1, c.num_experts, 4) + 6 * t(1, c.top_k, 4) + 2 * t(1, 1, 4);
  out->saved += t(rows, 12, 1) + t(1, D, A);  // send rows' tokens and keys; u
  if (c.shared_experts > 0) {                 // the shared experts' h_pre, h and output
    const double shared =
        t(1, first_matrix_cols(c.activation, c.shared_width()), A) + t(1, c.shared_width(), A);
    out->hidden += shared;
    out->saved += shared + t(1, D, A);
    // Gated (Qwen2-MoE): the output before the gate, and the logit (F).
    if (c.shared_expert_gate) out->saved += t(1, D, A) + t(1, 1, 4);
  }
  if (c.residual == ResidualKind::kAdam) out->saved += 2 * t(1, D, 4);  // the moments out (F)
}

// One block's bytes (inputs a layer reuses are shared, not counted twice). A: bytes per
// activation. state_in: the block is entered by a MoE layer's state (FULL keeps it).
BlockBytes block_bytes(const ModelConfig& m, const BlockPlan& b, int64_t A, int ep, bool state_in,
                       const TensorSizer& t) {
  const int64_t D = m.d_model;
  BlockBytes out;
  out.input = t(1, D, A) + (state_in ? t(1, D, 4) + t(1, 1, 4) : 0.0);  // h; state p, top1
  out.saved = attention_bytes(m, A, t);
  if (!b.moe) {
    // h_pre ([F], or [2F] when gated) and h; the FFN's input and output.
    out.hidden = t(1, first_matrix_cols(m.activation, m.d_ff), A) + t(1, m.d_ff, A);
    out.saved += out.hidden + 4 * t(1, D, A);
    out.backward = out.hidden;
    return out;
  }
  add_moe_bytes(b.moe_cfg, D, A, ep, t, &out);
  return out;
}

// The activation bytes of one micro-batch beside the head's logits (head_scratch_bytes): what
// stays from forward to backward under `recompute` (the blocks' kept tensors, the embedding's
// output, the head's input), and the largest transient of a block's backward. Backward frees
// the logits before the blocks' backward and each block's tensors after its own
// (TransformerLM::backward), so the two transients never coexist, and the first block to run
// backward (the last) finds every other block's tensors still kept: its own transient comes on
// top (a few [T, D] gradients, its expert rows' and hidden rows' gradients, and the hidden rows
// SELECTIVE recomputes or the whole block FULL replays).
struct ActivationBytes {
  double kept = 0, transient = 0;
};

ActivationBytes activation_bytes(const ModelConfig& m, int64_t A, int ep, Recompute recompute,
                                 const TensorSizer& t) {
  const int64_t D = m.d_model;
  ActivationBytes out;
  out.kept = 2 * t(1, D, A);  // the embedding's output and its dropout
  double largest = 0;
  bool state_in = false;
  for (const BlockPlan& b : m.blocks) {
    const BlockBytes block = block_bytes(m, b, A, ep, state_in, t);
    state_in = state_in || b.moe;
    switch (recompute) {
      case Recompute::kNone:
        out.kept += block.saved;
        largest = std::max(largest, block.backward);
        break;
      case Recompute::kSelective:
        out.kept += block.saved - block.hidden;
        largest = std::max(largest, block.hidden + block.backward);
        break;
      case Recompute::kFull:
        out.kept += block.input;
        largest = std::max(largest, block.saved + block.backward);
        break;
    }
  }
  out.kept += 2 * t(1, D, A) + t(1, 1, 4);   // final hidden, lse
  out.transient = largest + 6 * t(1, D, 4);  // with a few [T, D] gradients
  return out;
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

// The head's f32 logits and the gradient of one chunk of them (train.loss_chunk_tokens; the
// whole micro-batch by default), the step's largest transient from the end of forward on: every
// chunk's logits under NONE (and with one chunk), one chunk's when SELECTIVE or FULL recomputes
// them; the gradient is written over them under FP32, a chunk's act-dtype tensor beside them
// under BF16; beside them the head input's gradient [tokens, D]. On the CPU each tensor is a
// whole bucket of the host allocator (base/allocator.h: up to 1/8 more), which at a large
// vocabulary is no rounding error, and a bf16 product widens its operands to f32 outside it
// (kernels/cpu/blas_ref.cc): the head's weight [V, D] and a chunk's gradient.
int64_t head_scratch_bytes(int64_t vocab, int64_t d_model, const TrainConfig& t, int64_t tokens,
                           int64_t A) {
  if (tokens <= 0) return 0;
  const int64_t chunk = t.loss_chunk_tokens > 0 ? std::min(tokens, t.loss_chunk_tokens) : tokens;
  auto bucket = [&](int64_t bytes) { return held(bytes, t.device); };
  const int64_t row = vocab * 4;
  int64_t bytes = bucket(chunk * row);  // one chunk's logits
  if (t.recompute == Recompute::kNone || chunk == tokens) {
    bytes = (tokens / chunk) * bytes + bucket((tokens % chunk) * row);
  }
  bytes += bucket(tokens * d_model * A);  // dh
  if (A == 4) return bytes;
  bytes += bucket(chunk * vocab * A);  // the chunk's bf16 gradient
  if (t.device == DeviceKind::kCpu) bytes += 4 * (vocab * d_model + chunk * vocab);
  return bytes;
}

}  // namespace

MemoryEstimate estimate_training_memory(const RunConfig& cfg, int world_size) {
  const ModelConfig& m = cfg.model;
  const TrainConfig& t = cfg.train;
  const int64_t A = t.precision == Precision::kBf16 ? 2 : 4;  // activation bytes
  const ParameterCount count = count_parameters(m, std::max(1, cfg.parallel.ep));
  const int64_t params = count.params;
  MemoryEstimate e;
  e.parameters = params;
  add_parameter_bytes(count, t, world_size, std::max(1, cfg.parallel.ep), &e);

  // Activations of one micro-batch.
  const int64_t micro = t.micro_batch_per_rank(world_size);
  const int64_t tokens = micro * m.seq_len;
  e.recompute = t.recompute;
  const TensorSizer sizer{tokens, t.device};
  e.micro_batch_tokens = tokens;
  e.logits_scratch_bytes = head_scratch_bytes(m.vocab_size, m.d_model, t, tokens, A);
  const ActivationBytes act =
      activation_bytes(m, A, std::max(1, cfg.parallel.ep), t.recompute, sizer);
  e.backward_scratch_bytes = static_cast<int64_t>(std::ceil(act.transient));
  e.activation_bytes = static_cast<int64_t>(std::ceil(act.kept)) +
                       std::max(e.logits_scratch_bytes, e.backward_scratch_bytes);
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
