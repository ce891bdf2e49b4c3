// Token and learned position embeddings: h[b, s] = tokens[ids[b, s]] + positions[s].
// Parameters: <prefix>.tokens [V, D], <prefix>.positions [S, D].
#pragma once

#include <string>

#include "core/layers/parameters.h"

namespace moe {

class Embedding {
 public:
  Embedding(const std::string& prefix, int64_t vocab, int64_t d_model, int64_t seq_len,
            ParameterSet* params);
  // ids i32 [B, S] -> h [B*S, D] (overwritten). Ids outside [0, V) are kInvalidArgument.
  Status forward(const TensorView& ids, const TensorView& h) const;
  // Accumulates the table and position gradients.
  Status backward(const TensorView& ids, const TensorView& dh) const;
  Parameter& tokens() { return *tokens_; }

 private:
  int64_t seq_len_;
  Parameter* tokens_;
  Parameter* positions_;
};

// logits = h W^T with W [V, D]: an untied <prefix>.weight, or the token table when tied (its
// gradient then accumulates into the table's).
class OutputHead {
 public:
  OutputHead(const std::string& prefix, int64_t vocab, int64_t d_model, Parameter* tied,
             ParameterSet* params);
  Status forward(const TensorView& h, const TensorView& logits) const;
  // dh overwritten; the weight gradient accumulates.
  Status backward(const TensorView& h, const TensorView& d_logits, const TensorView& dh) const;

 private:
  Parameter* weight_;
};

}  // namespace moe
