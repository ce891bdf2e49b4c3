// Names every random stream of the model so that no two sites share draws. A stream is keyed by
// (seed, site, block, step) and indexed by a global token (or element) id, so masks do not depend
// on batch splits or EP layout.
#pragma once

#include <cstdint>

#include "base/check.h"
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

// The same stream at a step that may live in device memory (a step recorded in a CUDA graph,
// StepContext::device_step): then `step` is 0 here, the kernels read the step when they run, and
// the keys they derive from host offsets move by the step's first sequence x keys_per_sequence
// (the site's keys per sequence: its tokens, or 1 for attention's sequence keys). The same draws
// as site_rng at the host's step with offsets that include the step's sequences.
inline CounterRng site_rng(uint64_t seed, RandomSite site, int64_t block, int64_t step,
                           DeviceStep device_step, int64_t keys_per_sequence) {
  // Two steps would mix into one stream, and keys that do not move repeat every step's masks.
  MOE_CHECK(device_step.keys == nullptr || (step == 0 && keys_per_sequence > 0),
            "site_rng: a device step with host step ", step, " and ", keys_per_sequence,
            " keys per sequence");
  CounterRng rng = site_rng(seed, site, block, step);
  rng.device_step = device_step;
  rng.keys_per_sequence = keys_per_sequence;
  return rng;
}

}  // namespace moe
