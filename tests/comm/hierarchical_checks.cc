#include "tests/comm/hierarchical_checks.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/allocator.h"
#include "base/check.h"

namespace moe::comm::testing {
namespace {

// A byte of pseudo-random data, from (salt, rank, index) alone (splitmix64's finaliser).
uint8_t noise(uint64_t salt, int rank, size_t i) {
  uint64_t z = salt * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(rank) * 0xBF58476D1CE4E5B9ULL +
               static_cast<uint64_t>(i);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return static_cast<uint8_t>(z ^ (z >> 31));
}

// A [rows, width] tensor of `dtype` on `device` whose byte i is byte(i).
template <typename ByteFn>
StatusOr<Tensor> make_bytes(Device device, DType dtype, int64_t rows, int64_t width, ByteFn byte) {
  Tensor host = Tensor::empty({rows, width}, dtype);
  auto* p = static_cast<uint8_t*>(host.raw());
  for (size_t i = 0; i < host.nbytes(); ++i) p[i] = byte(i);
  if (device.is_host()) return host;
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<Allocator> pool, make_cuda_pool_allocator(device.index));
  MOE_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(host.shape(), dtype, pool, Stream{}, true));
  DeviceAccessScope device_side;
  MOE_RETURN_IF_ERROR(device_memcpy(t.raw(), device, host.raw(), Device::host(), host.nbytes()));
  MOE_RETURN_IF_ERROR(stream_synchronize(device, Stream{}));
  return t;
}

// The bytes of a view on any device (waits for the default stream).
StatusOr<std::vector<uint8_t>> bytes_of(const TensorView& v) {
  std::vector<uint8_t> out(v.nbytes());
  DeviceAccessScope device_side;
  MOE_RETURN_IF_ERROR(stream_synchronize(v.device(), Stream{}));
  MOE_RETURN_IF_ERROR(device_memcpy(out.data(), Device::host(), v.raw(), v.device(), v.nbytes()));
  MOE_RETURN_IF_ERROR(stream_synchronize(v.device(), Stream{}));
  return out;
}

// One round's count matrix [R][R], the same on every rank: 0..5 rows, a third of the pairs empty.
std::vector<std::vector<int64_t>> random_counts(int ranks, std::mt19937_64& rng) {
  std::vector<std::vector<int64_t>> counts(ranks, std::vector<int64_t>(ranks));
  for (auto& row : counts) {
    for (int64_t& c : row) {
      const uint64_t draw = rng();
      c = draw % 3 == 0 ? 0 : static_cast<int64_t>((draw >> 8) % 5 + 1);
    }
  }
  return counts;
}

StatusOr<AllToAllPlan> plan_of(const std::vector<std::vector<int64_t>>& counts, int me) {
  std::vector<int64_t> send = counts[me], recv;
  for (const std::vector<int64_t>& row : counts) recv.push_back(row[me]);
  return AllToAllPlan::from_counts(send, recv);
}

struct Exchange {
  std::string what;
  DType dtype = DType::kF32;
  int64_t width = 1;
  uint64_t salt = 0;
};

// The same rows through both communicators (all_to_all_v under `plan`, or all_to_all when
// `chunks` > 0 rows per peer) into outputs that start as the same sentinel bytes.
Status exchange_both(Communicator& flat, Communicator& hier, Device device, const Exchange& x,
                     const AllToAllPlan* plan, int64_t chunks) {
  const int me = flat.rank();
  const int64_t send_rows = plan ? plan->send_total : chunks * flat.world_size();
  const int64_t recv_rows = plan ? plan->recv_total : send_rows;
  const auto data = [&](size_t i) { return noise(x.salt, me, i); };
  const auto sentinel = [&](size_t i) { return static_cast<uint8_t>(0xA5 ^ (i * 7)); };
  MOE_ASSIGN_OR_RETURN(Tensor in, make_bytes(device, x.dtype, send_rows, x.width, data));
  MOE_ASSIGN_OR_RETURN(Tensor a, make_bytes(device, x.dtype, recv_rows, x.width, sentinel));
  MOE_ASSIGN_OR_RETURN(Tensor b, make_bytes(device, x.dtype, recv_rows, x.width, sentinel));
  if (plan) {
    MOE_RETURN_IF_ERROR(flat.all_to_all_v(in, *plan, a));
    MOE_RETURN_IF_ERROR(hier.all_to_all_v(in, *plan, b));
  } else {
    MOE_RETURN_IF_ERROR(flat.all_to_all(in, a));
    MOE_RETURN_IF_ERROR(hier.all_to_all(in, b));
  }
  MOE_ASSIGN_OR_RETURN(std::vector<uint8_t> want, bytes_of(a));
  MOE_ASSIGN_OR_RETURN(std::vector<uint8_t> got, bytes_of(b));
  if (got == want) return Status::OK();
  const size_t row_bytes = a.nbytes() / static_cast<size_t>(std::max<int64_t>(recv_rows, 1));
  size_t i = 0;
  while (got[i] == want[i]) ++i;
  return internal_error(x.what, " (", dtype_name(x.dtype), " x ", x.width, "): rank ", me,
                        " output row ", i / row_bytes, " of ", recv_rows,
                        " differs from the flat exchange's",
                        plan ? str_cat(" (plan ", plan->to_string(), ")") : std::string());
}

}  // namespace

Status check_hierarchical_matches_flat(Communicator& flat, Communicator& hierarchical,
                                       Device device, uint64_t seed, int rounds) {
  const int ranks = flat.world_size(), me = flat.rank();
  if (hierarchical.world_size() != ranks || hierarchical.rank() != me) {
    return internal_error("the two communicators differ in shape on rank ", me);
  }
  const std::vector<std::pair<DType, int64_t>> rows = {
      {DType::kF32, 3}, {DType::kF64, 1}, {DType::kBF16, 5}, {DType::kI32, 2}, {DType::kU8, 7}};
  std::mt19937_64 rng(seed);
  uint64_t salt = seed;
  for (int round = 0; round < rounds; ++round) {
    const std::vector<std::vector<int64_t>> counts = random_counts(ranks, rng);
    MOE_ASSIGN_OR_RETURN(AllToAllPlan plan, plan_of(counts, me));
    for (const auto& [dtype, width] : rows) {
      const std::string r = str_cat("round ", round, " ");
      const AllToAllPlan mine_left_out = plan.without(me), back = plan.transposed();
      MOE_RETURN_IF_ERROR(exchange_both(flat, hierarchical, device,
                                        {r + "all_to_all_v", dtype, width, ++salt}, &plan, 0));
      MOE_RETURN_IF_ERROR(exchange_both(flat, hierarchical, device,
                                        {r + "all_to_all_v without my rows", dtype, width, ++salt},
                                        &mine_left_out, 0));
      MOE_RETURN_IF_ERROR(exchange_both(flat, hierarchical, device,
                                        {r + "all_to_all_v transposed", dtype, width, ++salt},
                                        &back, 0));
    }
  }
  const AllToAllPlan empty = AllToAllPlan::uniform(ranks, 0);
  MOE_RETURN_IF_ERROR(exchange_both(
      flat, hierarchical, device, {"all_to_all_v of nothing", DType::kF32, 4, ++salt}, &empty, 0));
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    MOE_RETURN_IF_ERROR(
        exchange_both(flat, hierarchical, device, {"all_to_all", dtype, 3, ++salt}, nullptr, 2));
  }
  return Status::OK();
}

}  // namespace moe::comm::testing
