// Perplexity of a model on a sequence set, spread over every data rank: the sequences are split
// in rank order, each rank evaluates its share in batches of `batch` sequences (padding with
// ignored rows so that every rank of an EP group runs the same number of equal-sized batches),
// and the loss sums are all-reduced. PPL = exp(sum of token NLL / tokens).
#pragma once

#include "comm/communicator.h"
#include "core/data/sequences.h"
#include "core/model/transformer.h"

namespace moe {

struct EvalResult {
  double loss_sum = 0;
  int64_t tokens = 0;
  double mean_loss() const { return tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0; }
  double perplexity() const;
};

// max_sequences: 0 = every sequence of the set, else the first max_sequences. Collective over
// `world` (nullable) and the model's EP group.
StatusOr<EvalResult> evaluate_perplexity(TransformerLM* model, const data::SequenceSet& set,
                                         int64_t batch, int64_t max_sequences, uint64_t seed,
                                         comm::Communicator* world);

}  // namespace moe
