// Settings that are legal but rarely meant, said before the first step (rank 0, as warnings
// beside the start-up summary), so that a run does not fall silently into a size trap:
//   - the vocabulary holds most of the model's parameters: an uncapped word vocabulary of a large
//     corpus (116k words) made a model 97% embedding and five times slower per token. Said when
//     an uncapped word vocabulary holds over half the parameters, or any vocabulary over 90% (a
//     small capped model such as the quick start's, 72%, is what its config asks for); the
//     warning names the share and the cap to set;
//   - data.vocab_max_size or data.vocab_min_count set beside data.dataset, which brings its own
//     tokenizer: they do not apply, and the dataset's vocabulary size is named;
//   - train.steps not beyond schedule.warmup_steps: the learning rate never reaches its peak.
#pragma once

#include <string>
#include <vector>

#include "types/run_config.h"

namespace moe {

// The shares of the parameters in the token embedding and output head above which the start-up
// warns: for an uncapped word vocabulary built from the text, and for any vocabulary.
inline constexpr double kUncappedVocabularyShare = 0.5;
inline constexpr double kVocabularyShare = 0.9;
// The cap the warning suggests for a word vocabulary.
inline constexpr int64_t kSuggestedVocabCap = 32000;

// cfg: resolved (cfg.model.vocab_size known). One line per warning, without a prefix; empty when
// nothing looks wrong.
std::vector<std::string> config_warnings(const RunConfig& cfg);

}  // namespace moe
