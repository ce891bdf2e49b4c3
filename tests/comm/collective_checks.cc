#include "tests/comm/collective_checks.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "base/allocator.h"
#include "base/check.h"
#include "comm/process_groups.h"

namespace moe::comm::testing {
namespace {

using ValueFn = std::function<double(int64_t)>;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16,
                                DType::kI32, DType::kI64, DType::kU8};

void store(const TensorView& v, int64_t i, double x) {
  switch (v.dtype()) {
    case DType::kF32:
      v.data<float>()[i] = static_cast<float>(x);
      break;
    case DType::kF64:
      v.data<double>()[i] = x;
      break;
    case DType::kBF16:
      v.data<bf16>()[i] = bf16(static_cast<float>(x));
      break;
    case DType::kI32:
      v.data<int32_t>()[i] = static_cast<int32_t>(x);
      break;
    case DType::kI64:
      v.data<int64_t>()[i] = static_cast<int64_t>(x);
      break;
    case DType::kU8:
      v.data<uint8_t>()[i] = static_cast<uint8_t>(x);
      break;
  }
}

double load(const TensorView& v, int64_t i) {
  switch (v.dtype()) {
    case DType::kF32:
      return v.data<float>()[i];
    case DType::kF64:
      return v.data<double>()[i];
    case DType::kBF16:
      return static_cast<float>(v.data<bf16>()[i]);
    case DType::kI32:
      return v.data<int32_t>()[i];
    case DType::kI64:
      return static_cast<double>(v.data<int64_t>()[i]);
    case DType::kU8:
      return v.data<uint8_t>()[i];
  }
  return 0;
}

// A tensor on `device` holding value(i) (converted to dtype) at flat index i.
StatusOr<Tensor> make(Device device, DType dtype, Shape shape, const ValueFn& value) {
  Tensor host = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < host.numel(); ++i) store(host, i, value(i));
  if (device.is_host()) return host;
  MOE_ASSIGN_OR_RETURN(std::shared_ptr<Allocator> pool, make_cuda_pool_allocator(device.index));
  MOE_ASSIGN_OR_RETURN(Tensor t, Tensor::allocate(shape, dtype, pool, Stream{}, true));
  DeviceAccessScope device_side;
  MOE_RETURN_IF_ERROR(device_memcpy(t.raw(), device, host.raw(), Device::host(), host.nbytes()));
  MOE_RETURN_IF_ERROR(stream_synchronize(device, Stream{}));
  return t;
}

// A host copy of a view on any device (waits for the default stream).
Tensor host_copy(const TensorView& v) {
  if (v.is_host()) return Tensor::copy_of(v);
  Tensor host = Tensor::empty(v.shape(), v.dtype());
  DeviceAccessScope device_side;
  MOE_CHECK(stream_synchronize(v.device(), Stream{}).ok());
  MOE_CHECK(device_memcpy(host.raw(), Device::host(), v.raw(), v.device(), v.nbytes()).ok());
  MOE_CHECK(stream_synchronize(v.device(), Stream{}).ok());
  return host;
}

// OK when every element of `got` (any device) equals expected(i) exactly.
Status expect_values(const std::string& what, int rank, const TensorView& got,
                     const ValueFn& expected) {
  Tensor host = host_copy(got);
  for (int64_t i = 0; i < host.numel(); ++i) {
    const double want = expected(i);
    if (load(host, i) != want) {
      return internal_error(what, ": rank ", rank, " element ", i, " of ", got.to_string(), " is ",
                            load(host, i), ", expected ", want);
    }
  }
  return Status::OK();
}

Status expect_code(const std::string& what, const Status& s, StatusCode code) {
  if (s.code() != code) {
    return internal_error(what, ": expected ", status_code_name(code), ", got ", s.to_string());
  }
  return Status::OK();
}

bool is_signed(DType d) { return d != DType::kU8; }

}  // namespace

Status check_all_reduce(Communicator& comm, Device device) {
  const int n = comm.world_size();
  const int me = comm.rank();
  const int64_t count = 37;
  for (DType dtype : kAllDTypes) {
    // Small integers: exact in every dtype, sums over 4 ranks stay below 64.
    auto value = [&](int r, int64_t i) {
      return static_cast<double>((r * 7 + i * 3) % 11) - (is_signed(dtype) ? 5 : 0);
    };
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      for (bool in_place : {false, true}) {
        MOE_ASSIGN_OR_RETURN(Tensor in,
                             make(device, dtype, {count}, [&](int64_t i) { return value(me, i); }));
        MOE_ASSIGN_OR_RETURN(Tensor out, make(device, dtype, {count}, [](int64_t) { return 99; }));
        const TensorView& target = in_place ? in.view() : out.view();
        MOE_RETURN_IF_ERROR(comm.all_reduce(in, target, op));
        auto expected = [&](int64_t i) {
          double acc = value(0, i);
          for (int r = 1; r < n; ++r) {
            const double v = value(r, i);
            acc = op == ReduceOp::kSum   ? acc + v
                  : op == ReduceOp::kMax ? std::max(acc, v)
                                         : std::min(acc, v);
          }
          return acc;
        };
        MOE_RETURN_IF_ERROR(
            expect_values(str_cat("all_reduce ", dtype_name(dtype), " op ", static_cast<int>(op),
                                  in_place ? " in place" : ""),
                          me, target, expected));
      }
    }
  }
  return Status::OK();
}

Status check_all_gather(Communicator& comm, Device device) {
  const int n = comm.world_size();
  const int me = comm.rank();
  {
    MOE_ASSIGN_OR_RETURN(
        Tensor in, make(device, DType::kI64, {5, 3}, [&](int64_t i) { return me * 1000 + i; }));
    MOE_ASSIGN_OR_RETURN(Tensor out,
                         make(device, DType::kI64, {n * 5, 3}, [](int64_t) { return -1; }));
    MOE_RETURN_IF_ERROR(comm.all_gather(in, out));
    MOE_RETURN_IF_ERROR(expect_values("all_gather i64", me, out, [](int64_t i) {
      return static_cast<double>((i / 15) * 1000 + i % 15);
    }));
  }
  {
    MOE_ASSIGN_OR_RETURN(
        Tensor in, make(device, DType::kU8, {21}, [&](int64_t i) { return (me * 17 + i) % 256; }));
    MOE_ASSIGN_OR_RETURN(Tensor out, make(device, DType::kU8, {n, 21}, [](int64_t) { return 0; }));
    MOE_RETURN_IF_ERROR(comm.all_gather(in, out));
    MOE_RETURN_IF_ERROR(expect_values("all_gather u8", me, out, [](int64_t i) {
      return static_cast<double>(((i / 21) * 17 + i % 21) % 256);
    }));
  }
  {
    // In place: my chunk already sits at my place in out.
    MOE_ASSIGN_OR_RETURN(Tensor out, make(device, DType::kF32, {n * 6}, [&](int64_t i) {
                           return i / 6 == me ? me * 100 + i % 6 : -1;
                         }));
    MOE_RETURN_IF_ERROR(comm.all_gather(out.view().rows(me * 6, (me + 1) * 6), out));
    MOE_RETURN_IF_ERROR(expect_values("all_gather in place", me, out, [](int64_t i) {
      return static_cast<double>((i / 6) * 100 + i % 6);
    }));
  }
  return Status::OK();
}

Status check_reduce_scatter(Communicator& comm, Device device) {
  const int n = comm.world_size();
  const int me = comm.rank();
  const int64_t k = 13;
  for (DType dtype : kAllDTypes) {
    // Small integers, as check_all_reduce's: exact in every dtype.
    auto value = [&](int r, int64_t i) {
      return static_cast<double>((r * 5 + i * 3) % 11) - (is_signed(dtype) ? 5 : 0);
    };
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      for (bool in_place : {false, true}) {
        MOE_ASSIGN_OR_RETURN(Tensor in,
                             make(device, dtype, {n * k}, [&](int64_t i) { return value(me, i); }));
        MOE_ASSIGN_OR_RETURN(Tensor out, make(device, dtype, {k}, [](int64_t) { return 99; }));
        const TensorView target = in_place ? in.view().rows(me * k, (me + 1) * k) : out.view();
        MOE_RETURN_IF_ERROR(comm.reduce_scatter(in, target, op));
        auto expected = [&](int64_t i) {
          double acc = value(0, me * k + i);
          for (int r = 1; r < n; ++r) {
            const double v = value(r, me * k + i);
            acc = op == ReduceOp::kSum   ? acc + v
                  : op == ReduceOp::kMax ? std::max(acc, v)
                                         : std::min(acc, v);
          }
          return acc;
        };
        const std::string what = str_cat("reduce_scatter ", dtype_name(dtype), " op ",
                                         static_cast<int>(op), in_place ? " in place" : "");
        MOE_RETURN_IF_ERROR(expect_values(what, me, target, expected));
        if (in_place) {  // the other chunks of in are left as they were
          MOE_RETURN_IF_ERROR(expect_values(what + " (the rest of in)", me, in, [&](int64_t i) {
            return i / k == me ? expected(i - me * k) : value(me, i);
          }));
        }
      }
    }
  }
  return Status::OK();
}

Status check_reduction_order(Communicator& comm, Device device) {
  const int n = comm.world_size();
  const int me = comm.rank();
  const int64_t k = 9;
  // Element i: 1 on rank i % n, 2^-24 (half an ulp of 1) or 3 * 2^-25 on the others, so that
  // adding the small terms first or last gives another float.
  auto value = [&](int r, int64_t i) {
    if (r == i % n) return 1.0;
    return std::ldexp((r + i) % 2 == 0 ? 1.0 : 1.5, -24);
  };
  MOE_ASSIGN_OR_RETURN(Tensor in,
                       make(device, DType::kF32, {n * k}, [&](int64_t i) { return value(me, i); }));
  MOE_ASSIGN_OR_RETURN(Tensor summed,
                       make(device, DType::kF32, {n * k}, [](int64_t) { return 0; }));
  MOE_ASSIGN_OR_RETURN(Tensor mine, make(device, DType::kF32, {k}, [](int64_t) { return 0; }));
  MOE_RETURN_IF_ERROR(comm.all_reduce(in, summed, ReduceOp::kSum));
  MOE_RETURN_IF_ERROR(comm.reduce_scatter(in, mine, ReduceOp::kSum));
  if (comm.memory_space() == MemorySpace::kHost) {
    auto rank_order = [&](int64_t i) {
      float acc = static_cast<float>(value(0, i));
      for (int r = 1; r < n; ++r) acc += static_cast<float>(value(r, i));
      return static_cast<double>(acc);
    };
    MOE_RETURN_IF_ERROR(expect_values("all_reduce in rank order", me, summed, rank_order));
    MOE_RETURN_IF_ERROR(expect_values("reduce_scatter in rank order", me, mine,
                                      [&](int64_t i) { return rank_order(me * k + i); }));
  }
  if (comm.memory_space() == MemorySpace::kHost || n <= 2) {
    const Tensor whole = host_copy(summed);
    MOE_RETURN_IF_ERROR(expect_values("reduce_scatter against all_reduce", me, mine,
                                      [&](int64_t i) { return load(whole, me * k + i); }));
  }
  return Status::OK();
}

Status check_broadcast(Communicator& comm, Device device) {
  const int me = comm.rank();
  for (int root = 0; root < comm.world_size(); ++root) {
    auto value = [&](int64_t i) { return root * 100 + i + 0.5; };
    MOE_ASSIGN_OR_RETURN(Tensor buf, make(device, DType::kF64, {4, 7},
                                          [&](int64_t i) { return me == root ? value(i) : -1.0; }));
    MOE_RETURN_IF_ERROR(comm.broadcast(buf, root));
    MOE_RETURN_IF_ERROR(expect_values(str_cat("broadcast from ", root), me, buf, value));
  }
  return Status::OK();
}

Status check_all_to_all(Communicator& comm, Device device) {
  const int n = comm.world_size();
  const int me = comm.rank();
  // in [n * 2, 3] on rank s: chunk d (rows 2d, 2d+1) goes to rank d; element (row k, col j) of
  // that chunk is s*1000 + d*100 + k*10 + j.
  auto stamp = [](int src, int dst, int64_t k, int64_t j) {
    return src * 1000 + dst * 100 + k * 10 + j;
  };
  MOE_ASSIGN_OR_RETURN(Tensor in, make(device, DType::kI32, {n * 2, 3}, [&](int64_t i) {
                         return stamp(me, static_cast<int>(i / 6), (i % 6) / 3, i % 3);
                       }));
  MOE_ASSIGN_OR_RETURN(Tensor out,
                       make(device, DType::kI32, {n * 2, 3}, [](int64_t) { return -1; }));
  MOE_RETURN_IF_ERROR(comm.all_to_all(in, out));
  return expect_values("all_to_all", me, out, [&](int64_t i) {
    return stamp(static_cast<int>(i / 6), me, (i % 6) / 3, i % 3);
  });
}

namespace {
int64_t rows_between(int src, int dst) { return (src + 2 * dst + 1) % 4; }

Status all_to_all_v_round_trip(Communicator& comm, Device device, DType dtype, int64_t width) {
  const int n = comm.world_size();
  const int me = comm.rank();
  std::vector<int64_t> send(n), recv(n);
  for (int r = 0; r < n; ++r) {
    send[r] = rows_between(me, r);
    recv[r] = rows_between(r, me);
  }
  MOE_ASSIGN_OR_RETURN(AllToAllPlan plan, AllToAllPlan::from_counts(send, recv));
  // Row k of the block src sends to dst, column j. Small enough to be exact in bf16 for <= 4 ranks.
  auto stamp = [&](int src, int dst, int64_t k, int64_t j) {
    return dtype == DType::kBF16 ? static_cast<double>(src * 32 + dst * 8 + k * 2 + j)
                                 : src * 1e6 + dst * 1e4 + k * 10 + j;
  };
  auto sent_value = [&](int64_t i) {
    const int64_t row = i / width;
    int dst = 0;
    while (row >= plan.send_offsets[dst] + plan.send_counts[dst]) ++dst;
    return stamp(me, dst, row - plan.send_offsets[dst], i % width);
  };
  MOE_ASSIGN_OR_RETURN(Tensor in, make(device, dtype, {plan.send_total, width}, sent_value));
  MOE_ASSIGN_OR_RETURN(Tensor out,
                       make(device, dtype, {plan.recv_total, width}, [](int64_t) { return -1; }));
  MOE_RETURN_IF_ERROR(comm.all_to_all_v(in, plan, out));
  MOE_RETURN_IF_ERROR(
      expect_values(str_cat("all_to_all_v ", dtype_name(dtype)), me, out, [&](int64_t i) {
        const int64_t row = i / width;
        int src = 0;
        while (row >= plan.recv_offsets[src] + plan.recv_counts[src]) ++src;
        return stamp(src, me, row - plan.recv_offsets[src], i % width);
      }));
  // Send everything back along the transposed plan: the round trip restores `in`.
  MOE_ASSIGN_OR_RETURN(Tensor back,
                       make(device, dtype, {plan.send_total, width}, [](int64_t) { return -1; }));
  MOE_RETURN_IF_ERROR(comm.all_to_all_v(out, plan.transposed(), back));
  MOE_RETURN_IF_ERROR(
      expect_values(str_cat("all_to_all_v round trip ", dtype_name(dtype)), me, back, sent_value));
  // The plan without my own rows: the peers' rows arrive as before, my own rows of `out` keep
  // what they held (-1), and my own rows of `in` are not needed (-2 there, never seen).
  MOE_ASSIGN_OR_RETURN(
      Tensor in_peers, make(device, dtype, {plan.send_total, width}, [&](int64_t i) {
        const int64_t row = i / width;
        const bool own =
            row >= plan.send_offsets[me] && row < plan.send_offsets[me] + plan.send_counts[me];
        return own ? -2.0 : sent_value(i);
      }));
  MOE_ASSIGN_OR_RETURN(Tensor out_peers,
                       make(device, dtype, {plan.recv_total, width}, [](int64_t) { return -1; }));
  MOE_RETURN_IF_ERROR(comm.all_to_all_v(in_peers, plan.without(me), out_peers));
  return expect_values(
      str_cat("all_to_all_v without my rows ", dtype_name(dtype)), me, out_peers, [&](int64_t i) {
        const int64_t row = i / width;
        int src = 0;
        while (row >= plan.recv_offsets[src] + plan.recv_counts[src]) ++src;
        return src == me ? -1.0 : stamp(src, me, row - plan.recv_offsets[src], i % width);
      });
}
}  // namespace

Status check_all_to_all_v(Communicator& comm, Device device) {
  MOE_RETURN_IF_ERROR(all_to_all_v_round_trip(comm, device, DType::kF64, 3));
  return all_to_all_v_round_trip(comm, device, DType::kBF16, 2);
}

Status check_barrier(Communicator& comm) {
  for (int i = 0; i < 3; ++i) MOE_RETURN_IF_ERROR(comm.barrier());
  return Status::OK();
}

namespace {
std::string payload(int r) {
  std::string s(static_cast<size_t>(r) * 37, static_cast<char>('a' + r));
  if (r % 2 == 1) s += std::string("\0x\0", 3);
  return s;
}
}  // namespace

Status check_gather_bytes(Communicator& comm) {
  const int n = comm.world_size();
  for (int root = 0; root < n; ++root) {
    MOE_ASSIGN_OR_RETURN(std::vector<std::string> got,
                         comm.gather_bytes(payload(comm.rank()), root));
    if (comm.rank() != root) {
      if (!got.empty())
        return internal_error("gather_bytes: non-root rank ", comm.rank(), " got data");
      continue;
    }
    if (static_cast<int>(got.size()) != n) {
      return internal_error("gather_bytes: root ", root, " got ", got.size(), " strings");
    }
    for (int r = 0; r < n; ++r) {
      if (got[r] != payload(r)) {
        return internal_error("gather_bytes: root ", root, " got ", got[r].size(),
                              " wrong bytes from rank ", r);
      }
    }
  }
  return Status::OK();
}

Status check_broadcast_bytes(Communicator& comm) {
  for (int root = 0; root < comm.world_size(); ++root) {
    const std::string expected = str_cat("from root ", root, ":") + payload(root + 1);
    const std::string mine = comm.rank() == root ? expected : std::string("ignored");
    MOE_ASSIGN_OR_RETURN(std::string got, comm.broadcast_bytes(mine, root));
    // Through string_view: GCC 12 at -O1 reports a false stringop-overread on the std::string
    // comparison after the moved StatusOr value (with the tests' precompiled header first).
    if (std::string_view(got) != std::string_view(expected)) {
      return internal_error("broadcast_bytes: rank ", comm.rank(), " got '", got, "' from root ",
                            root);
    }
  }
  return Status::OK();
}

namespace {
// all_gather of each member's world rank: the members in group order.
StatusOr<std::vector<int64_t>> members_of(Communicator& group, int world_rank, Device device) {
  MOE_ASSIGN_OR_RETURN(Tensor in,
                       make(device, DType::kI64, {1}, [&](int64_t) { return world_rank; }));
  MOE_ASSIGN_OR_RETURN(Tensor out,
                       make(device, DType::kI64, {group.world_size()}, [](int64_t) { return -1; }));
  MOE_RETURN_IF_ERROR(group.all_gather(in, out));
  return to_vector<int64_t>(host_copy(out));
}
}  // namespace

Status check_split(Communicator& comm, Device device) {
  const int n = comm.world_size();
  const int me = comm.rank();
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> parity, comm.split(me % 2, -me));
  if (!parity) return internal_error("split: rank ", me, " got no communicator");
  std::vector<int64_t> expected;  // same parity, descending world rank (key = -rank)
  for (int r = n - 1; r >= 0; --r) {
    if (r % 2 == me % 2) expected.push_back(r);
  }
  const int64_t my_index = std::find(expected.begin(), expected.end(), me) - expected.begin();
  if (parity->world_size() != static_cast<int>(expected.size()) || parity->rank() != my_index) {
    return internal_error("split: rank ", me, " is rank ", parity->rank(), " of ",
                          parity->world_size(), ", expected ", my_index, " of ", expected.size());
  }
  MOE_ASSIGN_OR_RETURN(std::vector<int64_t> members, members_of(*parity, me, device));
  if (members != expected) return internal_error("split: rank ", me, " sees the wrong members");

  // The last rank opts out.
  const bool out = me == n - 1;
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> rest, comm.split(out ? -1 : 0, me));
  if (out != (rest == nullptr)) return internal_error("split: rank ", me, " opt-out mismatch");
  if (rest) {
    if (rest->world_size() != n - 1 || rest->rank() != me) {
      return internal_error("split: rank ", me, " is ", rest->rank(), " of ", rest->world_size());
    }
    MOE_RETURN_IF_ERROR(rest->barrier());
  }
  return Status::OK();
}

Status check_process_groups(Communicator& comm, Device device) {
  const int n = comm.world_size();
  const int me = comm.rank();
  for (int ep = 1; ep <= n; ++ep) {
    if (n % ep != 0) continue;
    MOE_ASSIGN_OR_RETURN(ProcessGroups g, make_process_groups(&comm, ep));
    if (g.world != &comm || g.ep_size != ep || g.dp_size != n / ep || g.ep_rank != me % ep ||
        g.dp_rank != me / ep || g.ep->rank() != me % ep || g.dp->rank() != me / ep) {
      return internal_error("process groups ep ", ep, ": rank ", me, " has ep ", g.ep_rank, "/",
                            g.ep_size, " dp ", g.dp_rank, "/", g.dp_size);
    }
    std::vector<int64_t> ep_expected, dp_expected;
    for (int i = 0; i < ep; ++i) ep_expected.push_back((me / ep) * ep + i);
    for (int i = 0; i < n / ep; ++i) dp_expected.push_back(me % ep + i * ep);
    MOE_ASSIGN_OR_RETURN(std::vector<int64_t> ep_members, members_of(*g.ep, me, device));
    MOE_ASSIGN_OR_RETURN(std::vector<int64_t> dp_members, members_of(*g.dp, me, device));
    if (ep_members != ep_expected || dp_members != dp_expected) {
      return internal_error("process groups ep ", ep, ": rank ", me, " has wrong members");
    }
    // A DP all_reduce sums the world ranks of the DP group.
    MOE_ASSIGN_OR_RETURN(Tensor x,
                         make(device, DType::kF32, {2}, [&](int64_t i) { return me + i; }));
    MOE_RETURN_IF_ERROR(g.dp->all_reduce(x, x, ReduceOp::kSum));
    double sum = 0;
    for (int64_t r : dp_expected) sum += static_cast<double>(r);
    MOE_RETURN_IF_ERROR(expect_values(str_cat("dp all_reduce ep ", ep), me, x,
                                      [&](int64_t i) { return sum + i * (n / ep); }));
  }
  return Status::OK();
}

Status check_argument_errors(Communicator& comm, Device device) {
  const int n = comm.world_size();
  AllToAllPlan plan = AllToAllPlan::uniform(n, 2);
  MOE_ASSIGN_OR_RETURN(Tensor in,
                       make(device, DType::kF32, {2 * n + 1, 4}, [](int64_t) { return 0; }));
  MOE_ASSIGN_OR_RETURN(Tensor out,
                       make(device, DType::kF32, {2 * n, 4}, [](int64_t) { return 0; }));
  MOE_RETURN_IF_ERROR(expect_code("all_to_all_v with too many rows",
                                  comm.all_to_all_v(in, plan, out), StatusCode::kInvalidArgument));
  AllToAllPlan wrong_size = AllToAllPlan::uniform(n + 1, 0);
  MOE_ASSIGN_OR_RETURN(Tensor empty_in,
                       make(device, DType::kF32, {0, 4}, [](int64_t) { return 0; }));
  MOE_ASSIGN_OR_RETURN(Tensor empty_out,
                       make(device, DType::kF32, {0, 4}, [](int64_t) { return 0; }));
  MOE_RETURN_IF_ERROR(expect_code("all_to_all_v with a plan of the wrong size",
                                  comm.all_to_all_v(empty_in, wrong_size, empty_out),
                                  StatusCode::kInvalidArgument));
  MOE_ASSIGN_OR_RETURN(Tensor f64,
                       make(device, DType::kF64, {2 * n, 4}, [](int64_t) { return 0; }));
  MOE_RETURN_IF_ERROR(expect_code("all_reduce f32 into f64",
                                  comm.all_reduce(out, f64, ReduceOp::kSum),
                                  StatusCode::kInvalidArgument));
  MOE_RETURN_IF_ERROR(expect_code("broadcast from a bad root", comm.broadcast(out, n),
                                  StatusCode::kInvalidArgument));
  MOE_RETURN_IF_ERROR(expect_code("reduce_scatter into a chunk of the wrong size",
                                  comm.reduce_scatter(out, out.view().rows(0, 1), ReduceOp::kSum),
                                  StatusCode::kInvalidArgument));
  // The communicator still works afterwards.
  return comm.barrier();
}

Status check_all(Communicator& comm, Device device) {
  MOE_RETURN_IF_ERROR(check_all_reduce(comm, device));
  MOE_RETURN_IF_ERROR(check_all_gather(comm, device));
  MOE_RETURN_IF_ERROR(check_reduce_scatter(comm, device));
  MOE_RETURN_IF_ERROR(check_reduction_order(comm, device));
  MOE_RETURN_IF_ERROR(check_broadcast(comm, device));
  MOE_RETURN_IF_ERROR(check_all_to_all(comm, device));
  MOE_RETURN_IF_ERROR(check_all_to_all_v(comm, device));
  MOE_RETURN_IF_ERROR(check_barrier(comm));
  MOE_RETURN_IF_ERROR(check_gather_bytes(comm));
  MOE_RETURN_IF_ERROR(check_broadcast_bytes(comm));
  MOE_RETURN_IF_ERROR(check_split(comm, device));
  MOE_RETURN_IF_ERROR(check_process_groups(comm, device));
  return check_argument_errors(comm, device);
}

}  // namespace moe::comm::testing
