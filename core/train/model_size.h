// The model's size and training compute, from its config alone: the parameters of the whole model
// (every expert of every rank, embeddings included), the parameters one token is computed with
// (the dense ones and its top-k experts' share), and the training FLOPs per token. Rank 0 prints
// them at start-up (startup_banner.h); each progress line turns tokens/s into FLOP/s with them
// (coordinator.h), and into MFU against the device's measured GEMM rate on a GPU (gemm_rate.h).
//
// Training FLOPs per token (forward + backward = 3 x forward; PaLM's convention, appendix B):
//   6 * N_matmul + 12 * L * d_model * seq_len
// N_matmul: the active parameters a token is multiplied with, i.e. every active parameter but
// the embedding lookups (the position table, and the token table when the output head has its
// own weight; a tied table counts, as the head; a SwiGLU FFN's [D, 2F] first matrix counts twice
// a plain one's, ffn_params). Biases, norms and the router's bias count as if multiplied too (a
// negligible excess); RoPE's rotations (a few FLOPs per q and k element) are not counted.
// 12 * L * d_model * seq_len: each of the L attention layers' scores (Q K^T) and mixing (P V),
// 2 x 2 x seq_len x d_model FLOPs per token forward over the whole seq_len x seq_len square (the
// causal mask's skipped half is not discounted), times 3. Capacity drops are not discounted
// either: a token counts its top-k experts.
#pragma once

#include <cstdint>
#include <string>

#include "types/run_config.h"

namespace moe {

struct ModelSize {
  int64_t total_params = 0;   // the whole model: every expert of every rank, embeddings included
  int64_t expert_params = 0;  // of which in experts (all of them)
  int64_t active_params = 0;  // per token: total - (E - K) / E of each MoE layer's experts
  int64_t lookup_params = 0;  // embedding tables a token only reads a row of
  int64_t matmul_params() const { return active_params - lookup_params; }  // N_matmul
  double train_flops_per_token = 0;
};

// m: a resolved model (m.vocab_size set).
ModelSize model_size(const ModelConfig& m);

// One FFN's parameters (the dense FFN, or one expert) as DenseFfn and ExpertFfn register them:
// w1 [D, F] ([D, 2F] when gated, so SwiGLU multiplies by 3 D F instead of 2 D F) and w2 [F, D];
// with biases, b1 [F] ([2F]) and b2 [D].
struct FfnParams {
  int64_t matrices = 0;  // w1 and w2, the GEMM operands
  int64_t biases = 0;
  int64_t total() const { return matrices + biases; }
};
FfnParams ffn_params(int64_t d_model, int64_t d_ff, ExpertActivation activation, bool bias);

// A count with an SI prefix and 3 significant digits: "3.56M", "812k", "42"; with a unit, a
// space before the prefix: "1.23 GFLOP".
std::string si_count(double value, const std::string& unit = "");

}  // namespace moe
