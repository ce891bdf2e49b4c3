// Token and learned position embeddings, and the output head that maps hidden states back to the
// vocabulary.
//   Embedding: h[b*S + s, :] = tokens[ids[b, s], :] + positions[s, :]
//     Parameters: <prefix>.tokens [V, D], <prefix>.positions [S_max, D]. Without learned
//     positions (a model whose attention rotates q and k by RoPE) h = tokens[ids] alone, and
//     <prefix>.positions is not registered.
//   OutputHead: logits = h W^T, W [V, D] (no bias): an untied <prefix>.weight, or the embedding's
//     token table when tied (the head's gradient then accumulates into the table's gradient).
// Initialisation is the model's job (kernels/init.h). The token table and the head are GEMM
// operands (bf16 working copies under BF16); positions stay full precision. The head's logits are
// full precision (the loss is fp32 always); its input gradient has the activation dtype. Forward
// and backward return new tensors and accumulate (+=) parameter gradients. Errors name the prefix.
#pragma once

#include <string>

#include "core/layers/parameters.h"

namespace moe {

class Embedding {
 public:
  // learned_positions false: no <prefix>.positions (positions come from elsewhere).
  Embedding(const std::string& prefix, int64_t vocab, int64_t d_model, int64_t max_seq_len,
            ParameterSet* params, bool learned_positions = true);
  // [in] ids i32 [B, S] on the device, 1 <= S <= S_max, each in [0, V). Returns h [B*S, D].
  // An id outside [0, V) is kInvalidArgument naming it.
  StatusOr<Tensor> forward(const TensorView& ids) const;
  // [in] ids i32 [B, S]; [in] dh [B*S, D]. Accumulates into the tokens and (learned) positions
  // gradients.
  Status backward(const TensorView& ids, const TensorView& dh) const;
  Parameter& tokens() { return *tokens_; }

 private:
  Status check_ids(const TensorView& ids) const;

  std::string prefix_;
  Context& ctx_;
  DType act_;
  int64_t d_model_, max_seq_len_;
  Parameter* tokens_;
  Parameter* positions_;  // nullptr without learned positions
};

class OutputHead {
 public:
  // tied: the embedding's token table [V, D] (borrowed; must outlive the head), or nullptr for
  // an untied <prefix>.weight.
  OutputHead(const std::string& prefix, int64_t vocab, int64_t d_model, Parameter* tied,
             ParameterSet* params);
  // [in] h [N, D] act; returns logits [N, V] F.
  StatusOr<Tensor> forward(const TensorView& h) const;
  // [in] the forward's h [N, D]; [in] d_logits [N, V] act; returns dh [N, D] act.
  // Accumulates into the weight's gradient (the token table's when tied).
  StatusOr<Tensor> backward(const TensorView& h, const TensorView& d_logits) const;
  // backward() into [out] dh [N, D] act (overwritten), e.g. a chunk's rows of a larger one.
  Status backward_into(const TensorView& h, const TensorView& d_logits, const TensorView& dh) const;
  bool tied() const { return tied_; }

 private:
  Status check(const char* name, const TensorView& t, int64_t cols) const;

  std::string prefix_;
  Context& ctx_;
  DType act_;
  bool tied_;
  Parameter* weight_;
};

}  // namespace moe
