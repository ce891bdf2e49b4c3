// Token and learned position embeddings, and the output head that maps hidden states back to the
// vocabulary.
//   Embedding: h[b*S + s, :] = tokens[ids[b, s], :] + positions[s, :]
//     Parameters: <prefix>.tokens [V, D], <prefix>.positions [S_max, D].
//   OutputHead: logits = h W^T, W [V, D] (no bias): an untied <prefix>.weight, or the embedding's
//     token table when tied (the head's gradient then accumulates into the table's gradient).
// Initialisation is the model's job (core/layers/init.h). Forward overwrites its output; backward
// overwrites dh (head) and accumulates (+=) parameter gradients. Errors name the layer's prefix.
#pragma once

#include <string>

#include "core/layers/parameters.h"

namespace moe {

class Embedding {
 public:
  Embedding(const std::string& prefix, int64_t vocab, int64_t d_model, int64_t max_seq_len,
            ParameterSet* params);
  // [in] ids i32 [B, S], 1 <= S <= S_max, each in [0, V). [out] h [B*S, D], overwritten.
  // An id outside [0, V) is kInvalidArgument naming it.
  Status forward(const TensorView& ids, const TensorView& h) const;
  // [in] ids i32 [B, S]; [in] dh [B*S, D]. Accumulates into the tokens and positions gradients.
  Status backward(const TensorView& ids, const TensorView& dh) const;
  Parameter& tokens() { return *tokens_; }

 private:
  Status check(const TensorView& ids, const char* h_name, const TensorView& h) const;

  std::string prefix_;
  int64_t d_model_, max_seq_len_;
  Parameter* tokens_;
  Parameter* positions_;
};

class OutputHead {
 public:
  // tied: the embedding's token table [V, D] (borrowed; must outlive the head), or nullptr for
  // an untied <prefix>.weight.
  OutputHead(const std::string& prefix, int64_t vocab, int64_t d_model, Parameter* tied,
             ParameterSet* params);
  // [in] h [N, D]; [out] logits [N, V], overwritten.
  Status forward(const TensorView& h, const TensorView& logits) const;
  // [in] the forward's h [N, D]; [in] d_logits [N, V]; [out] dh [N, D], overwritten.
  // Accumulates into the weight's gradient (the token table's when tied).
  Status backward(const TensorView& h, const TensorView& d_logits, const TensorView& dh) const;
  bool tied() const { return tied_; }

 private:
  Status check(const char* name, const TensorView& t, int64_t cols) const;

  std::string prefix_;
  bool tied_;
  Parameter* weight_;
};

}  // namespace moe
