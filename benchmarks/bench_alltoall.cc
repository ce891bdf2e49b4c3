// momoe-bench alltoall: the MoE token exchange (capacity mode, random routing seeded by rank)
// against a plain exchange of the same bytes, in one run, under mpirun (or alone: np 1 has no
// communicator, and every exchange is the dispatcher's local copy).
//   exchange: the two all-to-alls of dispatch + combine (send -> recv, recv -> send), called as
//             the dispatcher calls them, through comm::Communicator (MPI backend)
//   plain:    two MPI_Alltoall calls of the same bytes per peer, made directly
//   dispatch_combine: end to end, MoeDispatcher::dispatch then gather_back (row gathers into the
//             capacity buffer, both exchanges, compaction and its inverse); plan: the counts
//             exchange, the key exchange and the maps, which the layer pays once per forward
// Bytes come from the real plan, padding included (empty capacity slots travel too):
//   bytes_per_peer = E_l * C * D * 4 per direction
//   bytes_per_rank = 2 * (send rows + recv rows) * D * 4   (sent + received, both directions)
//   busbw_gbps     = 2 * send bytes * (R - 1) / R / time    (nccl-tests' all-to-all factor)
// Every timed iteration starts after a barrier and counts as its slowest rank (the max over
// ranks); the line gives the median and min over --iterations after --warmup untimed ones.
// Ratios: plain / exchange (target >= 0.9) and plain / dispatch_combine.
// Before timing, every rank checks combine(gather_back(dispatch(x))) == K x with unit gates on a
// small size where nothing drops, then == (kept slots) x with the plan that is timed.
//
//   mpirun -np 4 momoe-bench alltoall [--tokens 4096,16384] [--d 512] [--experts 16] [--top-k 2]
//                                     [--capacity-factor 1.25] [--iterations 20] [--warmup 3]
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "base/rng.h"
#include "benchmarks/bench_util.h"
#include "comm/world.h"
#include "core/layers/moe_dispatcher.h"
#include "kernels/moe_dispatch.h"

namespace moe::bench {
namespace {

// idx [T, K] i32: a random first expert per token, then the next K - 1 (distinct, wrapping).
Tensor random_routing(int rank, int64_t tokens, int64_t experts, int64_t k) {
  Tensor idx = Tensor::empty({tokens, k}, DType::kI32);
  CounterRng rng{11, make_stream(RngTag::kTest, static_cast<uint64_t>(rank), 1)};
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t first = rng.u32(t) % experts;
    for (int64_t j = 0; j < k; ++j)
      idx.data<int32_t>()[t * k + j] = static_cast<int32_t>((first + j) % experts);
  }
  return idx;
}

// combine(gather_back(dispatch(x))) with unit gates must be (slots kept for t) x_t: K x_t when
// nothing was dropped. (The benchmark's context is an unguarded host context: it reads results.)
Status check_identity(Context& ctx, const MoeDispatcher& d, const DispatchPlan& plan,
                      int64_t tokens, int64_t dim, int64_t k) {
  Tensor x = Tensor::empty({tokens, dim}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 1000);
  MOE_ASSIGN_OR_RETURN(Tensor rows, d.dispatch(x, plan));
  MOE_ASSIGN_OR_RETURN(Tensor send, d.gather_back(rows, plan));
  Tensor gates = Tensor::empty({tokens, k}, DType::kF32);
  for (int64_t i = 0; i < gates.numel(); ++i) gates.data<float>()[i] = 1.f;
  Tensor u = Tensor::empty({tokens, dim}, DType::kF32);
  MOE_RETURN_IF_ERROR(kernels::combine(ctx, send, plan.row, gates, TensorView(), u));
  const int32_t* slot = plan.slot.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t kept = 0;
    for (int64_t j = 0; j < k; ++j) kept += slot[t * k + j] >= 0;
    for (int64_t c = 0; c < dim; ++c) {
      const float want = static_cast<float>(kept) * x.data<float>()[t * dim + c];
      if (u.data<float>()[t * dim + c] != want) {
        return internal_error("check failed: combine(dispatch(x)) != (kept slots) x at token ", t);
      }
    }
  }
  return Status::OK();
}

// One rank: the plain reference exchange is a copy, in both directions (the dispatcher itself
// skips it: its receive buffer is the send buffer).
Status copy_both_ways(Context& ctx, const Tensor& send, const Tensor& recv) {
  MOE_RETURN_IF_ERROR(ctx.copy(send, recv));
  return ctx.copy(recv, send);
}

std::string mpi_library() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = "?";
  int length = 0;
  MPI_Get_library_version(version, &length);  // allowed before MPI_Init
  std::string s(version, static_cast<size_t>(std::max(length, 0)));
  s = s.substr(0, s.find_first_of(",\n"));
  return s;
}

// What `momoe-bench alltoall` was asked for (its flags, with their defaults).
struct AlltoallOptions {
  int64_t dim = 512, experts = 16, k = 2;
  double capacity_factor = 1.25;
  int iterations = 20, warmup = 3;
  std::vector<int64_t> tokens;
};

// Parses the flags.
StatusOr<AlltoallOptions> parse_alltoall_options(int argc, char** argv) {
  MOE_ASSIGN_OR_RETURN(Args a, Args::parse(argc, argv,
                                           {"tokens", "d", "experts", "top-k", "capacity-factor",
                                            "iterations", "warmup"}));
  AlltoallOptions o;
  o.dim = a.get("d", 512);
  o.experts = a.get("experts", 16);
  o.k = a.get("top-k", 2);
  o.capacity_factor = std::strtod(a.get_str("capacity-factor", "1.25").c_str(), nullptr);
  o.iterations = static_cast<int>(a.get("iterations", 20));
  o.warmup = static_cast<int>(a.get("warmup", 3));
  o.tokens = a.get_list("tokens", {4096, 16384});
  return o;
}

// Rank 0 prints the MPI library, the backend and what the plain exchange is.
void print_env_line(const comm::World& world, comm::Communicator* comm) {
  if (world.rank() != 0) return;
  JsonLine env("alltoall_env");
  env.str("mpi", mpi_library())
      .str("backend", comm != nullptr ? comm->backend_name() : "none (one rank)")
      .str("plain", comm != nullptr ? "MPI_Alltoall" : "memcpy")
      .num("world_size", world.size());
  std::printf("%s\n", env.dump().c_str());
}

// On at most 512 tokens with C = T (no token reaches an expert twice): nothing drops, and the
// result must be exactly K x.
Status check_without_drops(const AlltoallOptions& o, const MoeLayerConfig& cfg, Context& ctx,
                           comm::Communicator* comm, int rank, int64_t tokens) {
  const int64_t small = std::min<int64_t>(tokens, 512);
  MoeLayerConfig roomy = cfg;
  roomy.capacity_factor = static_cast<double>(o.experts) / static_cast<double>(o.k);
  MoeDispatcher d(roomy, &ctx, comm);
  DispatchPlan plan;
  Tensor drops = Tensor::zeros({2}, DType::kF64);
  MOE_RETURN_IF_ERROR(
      d.plan(random_routing(rank, small, o.experts, o.k), 0, {drops, TensorView()}, &plan));
  if (drops.data<double>()[0] != 0) return internal_error("check failed: C = T dropped a slot");
  return check_identity(ctx, d, plan, small, o.dim, o.k);
}

// The four timings of one token count.
struct AlltoallTimings {
  Timing exchange, plain, end_to_end, planning;
};

// The exchange as the dispatcher makes it: chunked [R, E_l * C, D] views, both directions.
StatusOr<Timing> time_exchange(const AlltoallOptions& o, Context& ctx, comm::Communicator* comm,
                               int ranks, int64_t rows, Tensor& send, Tensor& recv) {
  const Shape chunked{ranks, rows / ranks, o.dim};
  return time_it(
      o.warmup, o.iterations,
      [&]() -> Status {
        if (comm == nullptr) return copy_both_ways(ctx, send, recv);
        MOE_RETURN_IF_ERROR(
            comm->all_to_all(send.view().reshape(chunked), recv.view().reshape(chunked)));
        return comm->all_to_all(recv.view().reshape(chunked), send.view().reshape(chunked));
      },
      comm);
}

// Two MPI_Alltoall calls of the same bytes per peer, made directly.
StatusOr<Timing> time_plain(const AlltoallOptions& o, Context& ctx, comm::Communicator* comm,
                            int ranks, int64_t rows, Tensor& send, Tensor& recv) {
  if (rows / ranks * o.dim > INT_MAX)
    return invalid_argument_error("MPI_Alltoall count overflows int");
  const int count = static_cast<int>(rows / ranks * o.dim);
  return time_it(
      o.warmup, o.iterations,
      [&]() -> Status {
        if (comm == nullptr) return copy_both_ways(ctx, send, recv);
        if (MPI_Alltoall(send.raw(), count, MPI_FLOAT, recv.raw(), count, MPI_FLOAT,
                         MPI_COMM_WORLD) != MPI_SUCCESS ||
            MPI_Alltoall(recv.raw(), count, MPI_FLOAT, send.raw(), count, MPI_FLOAT,
                         MPI_COMM_WORLD) != MPI_SUCCESS) {
          return internal_error("MPI_Alltoall failed");
        }
        return Status::OK();
      },
      comm);
}

// Rank 0's result line for one token count.
void print_alltoall_line(const AlltoallOptions& o, int64_t tokens, int ranks,
                         const DispatchPlan& plan, const AlltoallTimings& t) {
  const int64_t dim = o.dim;
  const int64_t rows = plan.exchange.send_total, recv_rows = plan.exchange.recv_total;
  int64_t filled = 0;
  for (int64_t r = 0; r < rows; ++r) filled += plan.send_token.data<int32_t>()[r] >= 0;
  const double row_bytes = static_cast<double>(dim) * sizeof(float);
  const double send_bytes = static_cast<double>(rows) * row_bytes;
  const double bus = ranks > 1 ? 2 * send_bytes * (ranks - 1) / ranks : 2 * send_bytes;
  JsonLine j("alltoall");
  j.num("world_size", ranks)
      .num("tokens", tokens)
      .num("d", dim)
      .num("experts", o.experts)
      .num("top_k", o.k)
      .num("capacity_factor", o.capacity_factor)
      .num("capacity", plan.capacity)
      .num("send_rows", rows)
      .num("recv_rows", recv_rows)
      .num("filled_fraction", rows > 0 ? static_cast<double>(filled) / rows : 0.0)
      .num("bytes_per_peer", send_bytes / ranks)
      .num("bytes_per_rank", 2 * (rows + recv_rows) * row_bytes)
      .num("warmup", o.warmup)
      .num("iterations", o.iterations)
      .num("exchange_ms", t.exchange.median * 1e3)
      .num("exchange_min_ms", t.exchange.min * 1e3)
      .num("plain_ms", t.plain.median * 1e3)
      .num("plain_min_ms", t.plain.min * 1e3)
      .num("dispatch_combine_ms", t.end_to_end.median * 1e3)
      .num("dispatch_combine_min_ms", t.end_to_end.min * 1e3)
      .num("plan_ms", t.planning.median * 1e3)
      .num("exchange_busbw_gbps", bus / t.exchange.median / 1e9)
      .num("plain_busbw_gbps", bus / t.plain.median / 1e9)
      .num("ratio_plain_over_exchange", t.plain.median / t.exchange.median)
      .num("ratio_plain_over_dispatch_combine", t.plain.median / t.end_to_end.median)
      .str("check", "ok");
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// One token count: the checks, the four timings (collective over every rank), rank 0's line.
Status bench_tokens(const AlltoallOptions& o, int64_t tokens, comm::World* world, Context& ctx) {
  comm::Communicator* comm = world->comm.get();
  const int ranks = world->size();
  MoeLayerConfig cfg;
  cfg.d_model = o.dim;
  cfg.d_expert = o.dim;
  cfg.num_experts = o.experts;
  cfg.top_k = o.k;
  cfg.capacity_factor = o.capacity_factor;
  MOE_RETURN_IF_ERROR(cfg.validate("bench", ranks));
  MOE_RETURN_IF_ERROR(check_without_drops(o, cfg, ctx, comm, world->rank(), tokens));
  const Tensor idx = random_routing(world->rank(), tokens, o.experts, o.k);
  MoeDispatcher d(cfg, &ctx, comm);
  DispatchPlan plan;
  MOE_RETURN_IF_ERROR(d.plan(idx, 0, {}, &plan));
  MOE_RETURN_IF_ERROR(check_identity(ctx, d, plan, tokens, o.dim, o.k));

  const int64_t rows = plan.exchange.send_total, recv_rows = plan.exchange.recv_total;
  Tensor send = Tensor::zeros({rows, o.dim}, DType::kF32),
         recv = Tensor::zeros({recv_rows, o.dim}, DType::kF32);
  AlltoallTimings t;
  MOE_ASSIGN_OR_RETURN(t.exchange, time_exchange(o, ctx, comm, ranks, rows, send, recv));
  MOE_ASSIGN_OR_RETURN(t.plain, time_plain(o, ctx, comm, ranks, rows, send, recv));
  Tensor x = Tensor::empty({tokens, o.dim}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.f;
  MOE_ASSIGN_OR_RETURN(t.end_to_end, time_it(
                                         o.warmup, o.iterations,
                                         [&]() -> Status {
                                           MOE_ASSIGN_OR_RETURN(Tensor rows, d.dispatch(x, plan));
                                           return d.gather_back(rows, plan).status();
                                         },
                                         comm));
  MOE_ASSIGN_OR_RETURN(t.planning, time_it(
                                       o.warmup, o.iterations,
                                       [&]() -> Status {
                                         DispatchPlan p;
                                         return d.plan(idx, 0, {}, &p);
                                       },
                                       comm));
  if (world->rank() == 0) print_alltoall_line(o, tokens, ranks, plan, t);
  return Status::OK();
}

}  // namespace

StatusOr<BenchRun> bench_alltoall(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(const AlltoallOptions o, parse_alltoall_options(argc, argv));
  const int ranks = world->size();
  if (o.experts % ranks != 0) {
    return invalid_argument_error("--experts ", o.experts, " is not divisible by ", ranks,
                                  " ranks");
  }
  return BenchRun([o, world]() -> Status {
    std::unique_ptr<Context> ctx = Context::host();
    print_env_line(*world, world->comm.get());
    for (int64_t tokens : o.tokens) MOE_RETURN_IF_ERROR(bench_tokens(o, tokens, world, *ctx));
    return Status::OK();
  });
}

}  // namespace moe::bench
