#include "core/data/attack.h"

#include "base/rng.h"

namespace moe::data {

StatusOr<AttackResult> attack_tokens(const std::vector<int32_t>& tokens, double rate, uint64_t seed,
                                     const Vocabulary& vocab) {
  if (!(rate >= 0.0 && rate <= 1.0)) {
    return invalid_argument_error("attack rate = ", rate, " must be in [0, 1]");
  }
  const CounterRng rng{seed, make_stream(RngTag::kAttack, 0, 0)};
  const int64_t vocab_size = vocab.size();
  AttackResult result;
  result.tokens = tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t id = tokens[i];
    if (id < 0 || id >= vocab_size) {
      return invalid_argument_error("attack_tokens: token ", i, " has id ", id,
                                    " outside the vocabulary [0, ", vocab_size, ")");
    }
    if (id == Vocabulary::kEosId) continue;
    ++result.word_tokens;
    // uniform() is a multiple of 2^-24 in [0, 1): rate 0 never swaps, rate 1 always does.
    if (static_cast<double>(rng.uniform(static_cast<uint64_t>(i))) < rate) {
      result.tokens[i] = Vocabulary::kAttackId;
      ++result.swapped;
    }
  }
  if (result.word_tokens > 0) {
    result.swap_fraction =
        static_cast<double>(result.swapped) / static_cast<double>(result.word_tokens);
  }
  return result;
}

}  // namespace moe::data
