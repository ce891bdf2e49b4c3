#include "comm/all_to_all_plan.h"

#include <sstream>

namespace moe::comm {
namespace {
std::vector<int64_t> exclusive_prefix(const std::vector<int64_t>& counts, int64_t* total) {
  std::vector<int64_t> offsets(counts.size());
  int64_t sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    offsets[i] = sum;
    sum += counts[i];
  }
  *total = sum;
  return offsets;
}
}  // namespace

StatusOr<AllToAllPlan> AllToAllPlan::from_counts(std::vector<int64_t> send_counts,
                                                 std::vector<int64_t> recv_counts) {
  if (send_counts.size() != recv_counts.size() || send_counts.empty()) {
    return invalid_argument_error("all-to-all plan: ", send_counts.size(), " send counts and ",
                                  recv_counts.size(), " receive counts (need one per rank)");
  }
  for (size_t r = 0; r < send_counts.size(); ++r) {
    if (send_counts[r] < 0 || recv_counts[r] < 0) {
      return invalid_argument_error("all-to-all plan: negative count for rank ", r);
    }
  }
  AllToAllPlan plan;
  plan.send_offsets = exclusive_prefix(send_counts, &plan.send_total);
  plan.recv_offsets = exclusive_prefix(recv_counts, &plan.recv_total);
  plan.send_counts = std::move(send_counts);
  plan.recv_counts = std::move(recv_counts);
  return plan;
}

AllToAllPlan AllToAllPlan::uniform(int world_size, int64_t rows_per_rank) {
  std::vector<int64_t> counts(world_size, rows_per_rank);
  return std::move(from_counts(counts, counts)).value();
}

AllToAllPlan AllToAllPlan::transposed() const {
  AllToAllPlan t;
  t.send_counts = recv_counts;
  t.send_offsets = recv_offsets;
  t.recv_counts = send_counts;
  t.recv_offsets = send_offsets;
  t.send_total = recv_total;
  t.recv_total = send_total;
  return t;
}

AllToAllPlan AllToAllPlan::without(int rank) const {
  AllToAllPlan p = *this;
  if (rank >= 0 && rank < world_size()) {
    p.send_counts[rank] = 0;
    p.recv_counts[rank] = 0;
  }
  return p;
}

bool AllToAllPlan::is_uniform() const {
  for (size_t r = 0; r < send_counts.size(); ++r) {
    if (send_counts[r] != send_counts[0] || recv_counts[r] != send_counts[0]) return false;
  }
  return true;
}

std::string AllToAllPlan::to_string() const {
  std::ostringstream os;
  os << "send [";
  for (size_t r = 0; r < send_counts.size(); ++r) os << (r ? " " : "") << send_counts[r];
  os << "] recv [";
  for (size_t r = 0; r < recv_counts.size(); ++r) os << (r ? " " : "") << recv_counts[r];
  os << "]";
  return os.str();
}

}  // namespace moe::comm
