// How momoe-generate picks the next token from one row of logits, on the host in double precision
// so that the choice does not depend on the threads or the machine (given the same logits).
//
//   temperature 0: the argmax (the lowest id on ties); top_k and top_p do not matter.
//   otherwise:     the ids ordered by logit, highest first (ties: lowest id first); top_k > 0
//                  keeps the first top_k of them; p(id) = exp((logit - max) / temperature),
//                  normalised over the kept ids; top_p < 1 then keeps the shortest prefix of that
//                  order whose probability is >= top_p (nucleus sampling); the token is the first
//                  kept id whose cumulative probability exceeds u * (the kept ids' total).
// So top_k 1 (any temperature > 0) picks the same token as temperature 0.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace moe {

struct SamplingOptions {
  double temperature = 1.0;  // >= 0; 0: greedy
  int64_t top_k = 0;         // >= 0; 0: off
  double top_p = 1.0;        // in (0, 1]; 1: off
};

// kInvalidArgument naming the option that is out of range.
Status validate(const SamplingOptions& options);

// The id picked from `logits` [V] with the uniform draw u in [0, 1). kDataLoss when a logit is
// not finite (a diverged checkpoint); kInvalidArgument for an empty row.
StatusOr<int32_t> sample_token(const std::vector<double>& logits, const SamplingOptions& options,
                               double u);

}  // namespace moe
