// Training and evaluation sequences over one split's token stream.
//
// With N tokens and sequence length S, sequence i covers tokens [i*S, i*S + S] (S+1 tokens):
//   inputs  = tokens[i*S     .. i*S + S - 1]
//   targets = tokens[i*S + 1 .. i*S + S]
// so consecutive sequences share their boundary token and every token after the first is a target
// exactly once (up to the tail). There are floor((N-1)/S) sequences; the tail is not used.
//
// Evaluation visits every sequence of a split once, in order, in batches of B sequences (the last
// batch may be smaller); eval_batch_ids gives the ids of batch b.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "core/data/corpus.h"

namespace moe::data {

class SequenceSet {
 public:
  // Views `split.ids` (which must outlive the set and stay unchanged), or shares `split.shards`.
  // Errors (kInvalidArgument): seq_len < 1, or fewer than seq_len + 1 tokens (naming the split's
  // file, its token count and S).
  static StatusOr<SequenceSet> create(const TokenSplit& split, int64_t seq_len);

  int64_t size() const { return num_sequences_; }
  int64_t seq_len() const { return seq_len_; }
  const std::string& source() const { return source_; }

  // The split's tokens per word and per byte of its text (text_reader.h TextStats), to turn a
  // per-token loss into perplexity per word and bits per byte; 0 when the counts are unknown.
  double tokens_per_word() const { return tokens_per_word_; }
  double tokens_per_byte() const { return tokens_per_byte_; }
  // The split's share of <unk> tokens (words its vocabulary lacks), -1 when its counts are
  // unknown. Per-word perplexity and bits per byte flatter a text with many: each unknown word is
  // predicted as one easy token.
  double unknown_fraction() const { return unknown_fraction_; }

  // The tokens of the first `sequences` sequences, their inputs and targets: tokens
  // [0, sequences x S] (sequences x S + 1 of them), for the figures of an evaluated subset (its
  // <unk> share, the attack's swaps there). Errors (kInvalidArgument): `sequences` outside
  // [1, size()]; those of ShardedTokens::read for a split in shards.
  StatusOr<std::vector<int32_t>> leading_tokens(int64_t sequences) const;

  // Fills inputs and targets (i32 [B, S], host, B = ids.size()) for sequences `ids`.
  // Errors (kInvalidArgument): wrong dtype, shape or device; an id outside [0, size()); those of
  // ShardedTokens::read for a split in shards.
  Status fill(const std::vector<int64_t>& ids, const TensorView& inputs,
              const TensorView& targets) const;

 private:
  SequenceSet() = default;
  const int32_t* tokens_ = nullptr;  // [N], in memory; or
  std::shared_ptr<const ShardedTokens> shards_;
  double tokens_per_word_ = 0, tokens_per_byte_ = 0, unknown_fraction_ = -1;
  int64_t num_tokens_ = 0;
  int64_t seq_len_ = 0;
  int64_t num_sequences_ = 0;
  std::string source_;
};

// Number of sequences of length seq_len in num_tokens tokens: floor((num_tokens - 1) / seq_len),
// or kInvalidArgument naming `source` when num_tokens < seq_len + 1 (or seq_len < 1).
StatusOr<int64_t> count_sequences(int64_t num_tokens, int64_t seq_len, const std::string& source);

// Evaluation batches: ceil(num_sequences / batch) of them; batch b holds ids
// [b*batch, min((b+1)*batch, num_sequences)). Aborts on batch < 1 or b out of range.
int64_t num_eval_batches(int64_t num_sequences, int64_t batch);
std::vector<int64_t> eval_batch_ids(int64_t num_sequences, int64_t batch, int64_t b);

}  // namespace moe::data
