// Perplexity of a model on a sequence set, spread over every data rank: the sequences are split
// in rank order, each rank evaluates its share in batches of `batch` sequences (padding with
// ignored rows so that every rank of an EP group runs the same number of equal-sized batches),
// and the loss sums are all-reduced. PPL = exp(sum of token NLL / tokens).
//
// Perplexity per word and bits per byte compare models across tokenizers: the mean NLL per
// evaluated token, scaled by the split's tokens per word (or per byte) of its text,
//   word PPL = exp(mean NLL * tokens / words),  bits/byte = mean NLL * tokens / bytes / ln 2,
// i.e. the total NLL over the split's words (bytes) when the whole split is evaluated (all but its
// first token and a tail shorter than one sequence). Words are WikiText's word-level tokens
// (text_reader.h TextStats), so with the word tokenizer word PPL equals PPL exactly.
//
// A subset (the first max_sequences of a larger set) has no word or byte counts of its own (the
// ids do not say how many words or bytes of text they came from), so its word PPL and bits/byte
// are estimates: the subset's mean NLL at the whole split's tokens per word and per byte
// (EvalResult::subset says so; callers label them). Its tokens, perplexity and <unk> share are
// its own.
#pragma once

#include <functional>
#include <optional>

#include "comm/communicator.h"
#include "core/data/sequences.h"
#include "core/model/transformer.h"

namespace moe {

struct EvalResult {
  double loss_sum = 0;
  int64_t tokens = 0;
  bool stopped = false;                             // ended early on a stop request
  double tokens_per_word = 0, tokens_per_byte = 0;  // the whole set's (0: unknown)
  // The evaluated tokens' <unk> share (-1: unknown): the whole set's (SequenceSet), or a subset's
  // own, counted over its tokens (EvalOptions::unk_id; -1 without one).
  double unknown_fraction = -1;
  // The first max_sequences of a larger set: word_perplexity() and bits_per_byte() are estimates
  // at the whole set's tokens per word and per byte.
  bool subset = false;
  double mean_loss() const { return tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0; }
  double perplexity() const;
  std::optional<double> word_perplexity() const;  // nullopt when the text counts are unknown
  std::optional<double> bits_per_byte() const;
};

// How evaluate_perplexity runs: the per-rank batch; max_sequences 0 = every sequence of the set,
// else the first max_sequences; the seed of its random streams; the optional parts below; and the
// tokenizer's <unk> id, to count a subset's <unk> share (-1: none, the share is unknown).
struct EvalOptions {
  int64_t batch = 1;
  int64_t max_sequences = 0;
  uint64_t seed = 0;
  comm::Communicator* world = nullptr;
  std::function<bool()> stop;
  std::function<void(int64_t, int64_t)> progress;
  std::vector<RoutingDecisions>* routing = nullptr;
  int32_t unk_id = -1;
};

// Collective over `world` (nullable) and the model's EP group. `stop` (optional) is asked before
// every batch;
// when it says yes on any rank (a host all-reduce over `world` decides), every rank returns at
// once with `stopped` set (and no numbers). `progress` (optional) is called after every round
// with the sequences done so far and the total (on a GPU the rounds are queued, not waited for:
// the count runs ahead of the device by at most the launch queue). `routing` (optional) receives
// this rank's routing decisions: for each batch, in order, one entry per MoE layer (device
// tensors; nothing more is waited for).
StatusOr<EvalResult> evaluate_perplexity(TransformerLM* model, const data::SequenceSet& set,
                                         const EvalOptions& options);

}  // namespace moe
