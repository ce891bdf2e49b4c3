#include "core/data/batch_scheduler.h"

#include <algorithm>
#include <numeric>

#include "base/check.h"
#include "base/rng.h"

namespace moe::data {
namespace {

// Uniform integer in [0, bound) from 64 random bits by multiply-shift (Lemire). The bias is at
// most bound / 2^64, far below anything a shuffle of < 2^40 items can show.
uint64_t below(uint64_t bits, uint64_t bound) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * bound) >> 64);
}

}  // namespace

StatusOr<BatchScheduler> BatchScheduler::create(int64_t num_sequences, int64_t global_batch,
                                                uint64_t seed) {
  if (num_sequences < 1) {
    return invalid_argument_error("BatchScheduler: num_sequences = ", num_sequences,
                                  " must be >= 1");
  }
  if (global_batch < 1) {
    return invalid_argument_error("BatchScheduler: global_batch = ", global_batch, " must be >= 1");
  }
  return BatchScheduler(num_sequences, global_batch, seed);
}

std::vector<int64_t> BatchScheduler::epoch_order(uint64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(num_sequences_));
  std::iota(order.begin(), order.end(), int64_t{0});
  const CounterRng rng{seed_, make_stream(RngTag::kDataShuffle, 0, epoch)};
  // Fisher-Yates from the back: position i swaps with a uniform j in [0, i]; draw index i.
  for (int64_t i = num_sequences_ - 1; i > 0; --i) {
    uint32_t words[4];
    rng.block(static_cast<uint64_t>(i), words);
    const uint64_t bits = (static_cast<uint64_t>(words[0]) << 32) | words[1];
    const auto j = static_cast<int64_t>(below(bits, static_cast<uint64_t>(i) + 1));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

const std::vector<int64_t>& BatchScheduler::order_for(uint64_t epoch) const {
  if (cached_order_.empty() || cached_epoch_ != epoch) {
    cached_order_ = epoch_order(epoch);
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

std::vector<int64_t> BatchScheduler::take(DataCursor* cursor) const {
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(global_batch_));
  while (static_cast<int64_t>(ids.size()) < global_batch_) {
    const std::vector<int64_t>& order = order_for(cursor->epoch);
    const int64_t want = global_batch_ - static_cast<int64_t>(ids.size());
    const int64_t n = std::min(want, num_sequences_ - cursor->position);
    ids.insert(ids.end(), order.begin() + cursor->position, order.begin() + cursor->position + n);
    cursor->position += n;
    if (cursor->position == num_sequences_) {
      ++cursor->epoch;
      cursor->position = 0;
    }
  }
  ++cursor->step;
  return ids;
}

std::vector<int64_t> BatchScheduler::next() { return take(&cursor_); }

std::vector<int64_t> BatchScheduler::peek() const {
  DataCursor copy = cursor_;
  return take(&copy);
}

Status BatchScheduler::restore(const DataCursor& cursor) {
  if (cursor.position < 0 || cursor.position >= num_sequences_) {
    return invalid_argument_error("data cursor position ", cursor.position, " outside [0, ",
                                  num_sequences_, ") (num_sequences = ", num_sequences_,
                                  "; was the checkpoint made with another corpus or sequence "
                                  "length?)");
  }
  if (cursor.step < 0) {
    return invalid_argument_error("data cursor step ", cursor.step, " must be >= 0");
  }
  cursor_ = cursor;
  return Status::OK();
}

DataCursor BatchScheduler::cursor_at_step(int64_t step) const {
  MOE_CHECK(step >= 0, "cursor_at_step(", step, ")");
  // step * global_batch can exceed 2^63 only after absurdly many steps; use 128 bits anyway.
  const unsigned __int128 consumed =
      static_cast<unsigned __int128>(step) * static_cast<uint64_t>(global_batch_);
  DataCursor cursor;
  cursor.epoch = static_cast<uint64_t>(consumed / static_cast<uint64_t>(num_sequences_));
  cursor.position = static_cast<int64_t>(consumed % static_cast<uint64_t>(num_sequences_));
  cursor.step = step;
  return cursor;
}

StatusOr<std::vector<int64_t>> split_for_rank(const std::vector<int64_t>& global_ids, int dp_size,
                                              int dp_rank) {
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size) {
    return invalid_argument_error("split_for_rank: dp_rank = ", dp_rank,
                                  " must be in [0, dp_size = ", dp_size, ")");
  }
  const int64_t b = static_cast<int64_t>(global_ids.size());
  if (b % dp_size != 0) {
    return invalid_argument_error("global batch of ", b,
                                  " sequences is not divisible by the data-parallel size ", dp_size,
                                  "; choose a global_batch that is a multiple of ", dp_size);
  }
  const int64_t per_rank = b / dp_size;
  return std::vector<int64_t>(global_ids.begin() + dp_rank * per_rank,
                              global_ids.begin() + (dp_rank + 1) * per_rank);
}

std::vector<int64_t> split_balanced_for_rank(const std::vector<int64_t>& global_ids, int dp_size,
                                             int dp_rank) {
  MOE_CHECK(dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size, "split_balanced_for_rank: rank ",
            dp_rank, " of ", dp_size);
  const int64_t b = static_cast<int64_t>(global_ids.size());
  const int64_t base = b / dp_size;
  const int64_t extra = b % dp_size;
  const int64_t begin = dp_rank * base + std::min<int64_t>(dp_rank, extra);
  const int64_t end = begin + base + (dp_rank < extra ? 1 : 0);
  return std::vector<int64_t>(global_ids.begin() + begin, global_ids.begin() + end);
}

}  // namespace moe::data
