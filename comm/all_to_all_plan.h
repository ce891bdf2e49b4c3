// Counts -> displacements for one all-to-all-v, computed once and shared by the dispatch, the
// combine (the transposed plan) and both backwards. Counts are in rows: views exchanged under a
// plan are [rows, ...] with one row size on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace moe::comm {

struct AllToAllPlan {
  std::vector<int64_t> send_counts;   // [R] rows sent to rank r
  std::vector<int64_t> send_offsets;  // [R] first row sent to rank r (exclusive prefix sum)
  std::vector<int64_t> recv_counts;   // [R] rows received from rank r
  std::vector<int64_t> recv_offsets;  // [R]
  int64_t send_total = 0;
  int64_t recv_total = 0;

  // Builds offsets as exclusive prefix sums. Both vectors must have one entry per rank, >= 0.
  static StatusOr<AllToAllPlan> from_counts(std::vector<int64_t> send_counts,
                                            std::vector<int64_t> recv_counts);
  // Every rank sends `rows_per_rank` rows to every rank (the capacity-buffer exchange).
  static AllToAllPlan uniform(int world_size, int64_t rows_per_rank);
  // The reverse exchange: what was received is sent back (combine, dispatch backward).
  AllToAllPlan transposed() const;
  // The same plan with `rank`'s own rows left out (its counts 0, every offset and total kept):
  // the exchange then moves only the peers' rows, and the caller puts its own rows in place
  // itself (the dispatch gathers them straight into the receive buffer).
  AllToAllPlan without(int rank) const;
  int world_size() const { return static_cast<int>(send_counts.size()); }
  bool is_uniform() const;
  std::string to_string() const;
};

}  // namespace moe::comm
