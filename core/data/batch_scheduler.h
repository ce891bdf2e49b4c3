// Which sequences each optimiser step trains on, independent of the data-parallel layout.
//
// Epoch e is a seeded shuffle of all sequence ids [0, num_sequences): Fisher-Yates driven by
// CounterRng{seed, make_stream(RngTag::kDataShuffle, 0, e)}. Step s takes the next global_batch
// ids of that order, continuing into epoch e+1's shuffle when epoch e runs out (so one global
// batch can straddle two epochs). The global batch depends only on (num_sequences, global_batch,
// seed, cursor), never on the DP size; split_for_rank then gives each DP rank a contiguous slice.
//
// The cursor (epoch, position in that epoch's order, step) is plain data for checkpoints: a
// scheduler restored to a saved cursor continues exactly as the original would have.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace moe::data {

struct DataCursor {
  uint64_t epoch = 0;    // which shuffle
  int64_t position = 0;  // next index into that epoch's order, in [0, num_sequences)
  int64_t step = 0;      // optimiser steps taken
  bool operator==(const DataCursor& o) const {
    return epoch == o.epoch && position == o.position && step == o.step;
  }
};

class BatchScheduler {
 public:
  // Errors (kInvalidArgument): num_sequences < 1 or global_batch < 1.
  static StatusOr<BatchScheduler> create(int64_t num_sequences, int64_t global_batch,
                                         uint64_t seed);

  // The global batch [global_batch] at the cursor; advances the cursor by one step.
  std::vector<int64_t> next();
  // The global batch at the cursor, without advancing.
  std::vector<int64_t> peek() const;

  const DataCursor& cursor() const { return cursor_; }
  // Errors (kInvalidArgument): position outside [0, num_sequences) or step < 0.
  Status restore(const DataCursor& cursor);

  // The cursor after `step` steps from the start with this global batch (pure arithmetic).
  DataCursor cursor_at_step(int64_t step) const;
  // The permutation of [0, num_sequences) used by epoch `epoch` [num_sequences].
  std::vector<int64_t> epoch_order(uint64_t epoch) const;

  int64_t num_sequences() const { return num_sequences_; }
  int64_t global_batch() const { return global_batch_; }
  uint64_t seed() const { return seed_; }

 private:
  BatchScheduler(int64_t num_sequences, int64_t global_batch, uint64_t seed)
      : num_sequences_(num_sequences), global_batch_(global_batch), seed_(seed) {}
  // The ids at the cursor and the cursor after them.
  std::vector<int64_t> take(DataCursor* cursor) const;
  const std::vector<int64_t>& order_for(uint64_t epoch) const;

  int64_t num_sequences_;
  int64_t global_batch_;
  uint64_t seed_;
  DataCursor cursor_;
  // One cached epoch order (recomputed when another epoch is needed).
  mutable uint64_t cached_epoch_ = 0;
  mutable std::vector<int64_t> cached_order_;
};

// Rank dp_rank's contiguous slice of a global batch: ids [r*B/dp, (r+1)*B/dp) with B = size.
// Errors (kInvalidArgument): dp_size < 1, dp_rank outside [0, dp_size), or B not divisible by
// dp_size (the message names B and dp_size).
StatusOr<std::vector<int64_t>> split_for_rank(const std::vector<int64_t>& global_ids, int dp_size,
                                              int dp_rank);

// For evaluation batches that need not divide: the first (B mod dp_size) ranks get one id more
// than the others (some ranks may get none). Contiguous, in rank order. Aborts on bad dp args.
std::vector<int64_t> split_balanced_for_rank(const std::vector<int64_t>& global_ids, int dp_size,
                                             int dp_rank);

}  // namespace moe::data
