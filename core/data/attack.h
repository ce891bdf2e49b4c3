// The word-swap attack of spec/momentum-smoe.md 6.4 (TextAttack's "randomly replaces words in the
// dataset with a generic 'AAA'"), applied to validation/test token streams for robustness
// evaluation. The spec leaves the rate, the seed and the handling of `<eos>` open; here:
//   - each word token (every token except `<eos>`, including `<unk>`) independently becomes
//     `AAA` with probability `rate`; `<eos>` is never swapped;
//   - the coin for token position i is CounterRng{seed, make_stream(RngTag::kAttack, 0, 0)}
//     .uniform(i) < rate, so the attack is a pure function of (tokens, rate, seed) and any
//     slice of the stream can be attacked independently with the same result;
//   - `AAA` is the reserved vocabulary id Vocabulary::kAttackId (2; see vocabulary.h);
//   - the realised swap fraction (swapped / word tokens) is returned for reporting.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "core/data/vocabulary.h"

namespace moe::data {

struct AttackResult {
  std::vector<int32_t> tokens;  // [N] the attacked stream
  int64_t word_tokens = 0;      // tokens that could be swapped (all but <eos>)
  int64_t swapped = 0;          // positions replaced by AAA (a word already AAA counts if drawn)
  double swap_fraction = 0.0;   // swapped / word_tokens (0 when there are no words)
};

// Errors (kInvalidArgument): rate outside [0, 1] (or NaN); a token id outside the vocabulary.
StatusOr<AttackResult> attack_tokens(const std::vector<int32_t>& tokens, double rate, uint64_t seed,
                                     const Vocabulary& vocab);

}  // namespace moe::data
