// Names every random stream of the model so that no two sites share draws. A stream is keyed by
// (seed, site, block, step) and indexed by a global token (or element) id, so masks do not depend
// on batch splits or EP layout.
#pragma once

#include <cstdint>

#include "base/rng.h"

namespace moe {

enum class RandomSite : uint8_t {
  kAttentionProbs = 0,
  kAttentionOut = 1,
  kFfnHidden = 2,  // the dense FFN's hidden units, or an MoE block's shared experts' (a block has
                   // one or the other)
  kFfnOut = 3,
  kExpertHidden = 4,
  kMoeOut = 5,
  kEmbedding = 6,
  kSparseMixer = 7,
};

inline CounterRng site_rng(uint64_t seed, RandomSite site, int64_t block, int64_t step) {
  const RngTag tag = site == RandomSite::kSparseMixer ? RngTag::kSparseMixer : RngTag::kDropout;
  return CounterRng{seed,
                    make_stream(tag, static_cast<uint64_t>(block) * 8 + static_cast<uint64_t>(site),
                                static_cast<uint64_t>(step))};
}

}  // namespace moe
