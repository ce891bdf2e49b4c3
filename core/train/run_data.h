// The data of a training run: the tokenized corpus (built once by rank 0 into the cache, then
// loaded by every rank), its training/validation/test sequences, and the word-swap-attacked
// validation and test streams used for robustness evaluation.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "core/data/attack.h"
#include "core/data/corpus.h"
#include "core/data/sequences.h"
#include "types/run_config.h"

namespace moe {

struct RunData {
  data::TokenizedCorpus corpus;
  data::TokenSplit attacked_valid, attacked_test;
  double attacked_valid_rate = 0, attacked_test_rate = 0;  // realised swap fractions
  std::optional<data::SequenceSet> train, valid, test, attacked_valid_seq, attacked_test_seq;
};

// Loads (or builds and caches) the corpus of `cfg.data` for sequences of cfg.model.seq_len.
// Rank 0 builds first; the others wait and then read the cache, so the text is tokenized once.
// Errors name the file (missing, empty, invalid UTF-8, too short for one sequence). Collective
// over `world` (nullable).
// stop_requested (optional): asked while a SentencePiece cache is prepared (an interruption
// returns kAborted; the preparation resumes on the next run).
StatusOr<std::unique_ptr<RunData>> load_run_data(
    const RunConfig& cfg, const std::string& run_dir, comm::Communicator* world,
    const std::function<bool()>& stop_requested = nullptr);

}  // namespace moe
