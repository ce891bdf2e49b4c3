// momoe-bench alltoall: the MoE token exchange against a plain exchange of the same bytes, in one
// run, under mpirun:
//   exchange: the dispatcher's all-to-all of the capacity buffer through comm::MpiCommunicator
//   plain:    MPI_Alltoall of the same number of bytes per peer, called directly
//   moe:      the whole dispatch + combine data path (row gathers, counts exchange, both
//             all-to-alls, compaction) as the MoE layer runs it
// Bytes are counted from the real plan (padding rows included, since they travel):
//   bytes_per_rank = send rows * D * 4 for one direction; dispatch + combine move twice that.
// Ratios: plain_time / exchange_time (target >= 0.9) and 2 * plain_time / moe_time.
// A correctness pre-check runs first: combine(dispatch(x)) with unit gates must equal K * x.
//
//   mpirun -np 4 momoe-bench alltoall [--tokens 4096,16384] [--d 512] [--experts 16] [--top-k 2]
//                                     [--iterations 20] [--warmup 3]
#include <mpi.h>

#include <cstdio>

#include "benchmarks/bench_util.h"
#include "core/base/rng.h"
#include "core/layers/moe_dispatcher.h"
#include "kernels/moe_dispatch.h"
#include "launcher/world.h"

namespace moe::bench {
namespace {

Tensor random_routing(int rank, int64_t tokens, int64_t experts, int64_t k) {
  Tensor idx = Tensor::empty({tokens, k}, DType::kI32);
  CounterRng rng{11, make_stream(RngTag::kTest, static_cast<uint64_t>(rank), 1)};
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t first = rng.u32(t) % experts;
    for (int64_t j = 0; j < k; ++j) idx.data<int32_t>()[t * k + j] = static_cast<int32_t>((first + j) % experts);
  }
  return idx;
}

Status check_identity(const MoeDispatcher& d, const DispatchPlan& plan, int64_t tokens, int64_t dim,
                      int64_t k) {
  Tensor x = Tensor::empty({tokens, dim}, DType::kF32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 1000);
  Tensor compact, send;
  MOE_RETURN_IF_ERROR(d.dispatch(x, plan, &compact));
  MOE_RETURN_IF_ERROR(d.gather_back(compact, plan, &send));
  Tensor gates = Tensor::empty({tokens, k}, DType::kF32);
  for (int64_t i = 0; i < gates.numel(); ++i) gates.data<float>()[i] = 1.f;
  Tensor u = Tensor::empty({tokens, dim}, DType::kF32);
  MOE_RETURN_IF_ERROR(kernels::combine(send, plan.row, gates, TensorView(), u));
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (u.data<float>()[i] != static_cast<float>(k) * x.data<float>()[i]) {
      return internal_error("check failed: combine(dispatch(x)) != K x at element ", i);
    }
  }
  return Status::OK();
}

}  // namespace

Status bench_alltoall(int argc, char** argv, World* world) {
  MOE_ASSIGN_OR_RETURN(Args a, Args::parse(argc, argv, {"tokens", "d", "experts", "top-k", "iterations", "warmup"}));
  const int64_t dim = a.get("d", 512), experts = a.get("experts", 16), k = a.get("top-k", 2);
  const int iterations = static_cast<int>(a.get("iterations", 20)), warmup = static_cast<int>(a.get("warmup", 3));
  comm::Communicator* comm = world->comm.get();
  const int ranks = world->size();
  if (experts % ranks != 0) return invalid_argument_error("--experts ", experts, " is not divisible by ", ranks, " ranks");
  for (int64_t tokens : a.get_list("tokens", {4096, 16384})) {
    MoeLayerConfig cfg;
    cfg.d_model = dim;
    cfg.d_expert = dim;
    cfg.num_experts = experts;
    cfg.top_k = k;
    cfg.capacity_factor = 1.25;
    MOE_RETURN_IF_ERROR(cfg.validate("bench", ranks));
    MoeDispatcher d(cfg, comm);
    Tensor idx = random_routing(world->rank(), tokens, experts, k);
    DispatchPlan plan;
    MOE_RETURN_IF_ERROR(d.plan(idx, 0, &plan));
    MOE_RETURN_IF_ERROR(check_identity(d, plan, tokens, dim, k));

    const int64_t rows = plan.exchange.send_total;
    Tensor x = Tensor::empty({tokens, dim}, DType::kF32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.f;
    Tensor send = Tensor::zeros({rows, dim}, DType::kF32), recv = Tensor::zeros({rows, dim}, DType::kF32);
    const Shape chunked{ranks, rows / ranks, dim};
    MOE_ASSIGN_OR_RETURN(Timing exchange, time_it(warmup, iterations, [&]() -> Status {
      if (comm == nullptr) return device_memcpy(recv.raw(), recv.device(), send.raw(), send.device(), send.nbytes());
      return comm->all_to_all(send.view().reshape(chunked), recv.view().reshape(chunked));
    }));
    const int count = static_cast<int>(rows / ranks * dim);
    MOE_ASSIGN_OR_RETURN(Timing plain, time_it(warmup, iterations, [&]() -> Status {
      if (comm == nullptr) return device_memcpy(recv.raw(), recv.device(), send.raw(), send.device(), send.nbytes());
      if (MPI_Alltoall(send.raw(), count, MPI_FLOAT, recv.raw(), count, MPI_FLOAT, MPI_COMM_WORLD) != MPI_SUCCESS) {
        return internal_error("MPI_Alltoall failed");
      }
      return Status::OK();
    }));
    MOE_ASSIGN_OR_RETURN(Timing moe, time_it(warmup, iterations, [&]() -> Status {
      DispatchPlan p;
      MOE_RETURN_IF_ERROR(d.plan(idx, 0, &p));
      Tensor compact, back;
      MOE_RETURN_IF_ERROR(d.dispatch(x, p, &compact));
      return d.gather_back(compact, p, &back);
    }));
    if (world->rank() == 0) {
      const double bytes = static_cast<double>(rows) * dim * 4;
      JsonLine j("alltoall");
      j.num("world_size", ranks).num("tokens", tokens).num("d", dim).num("experts", experts).num("top_k", k)
          .num("capacity", plan.capacity).num("bytes_per_rank", bytes).num("iterations", iterations)
          .num("exchange_ms", exchange.median * 1e3).num("plain_ms", plain.median * 1e3)
          .num("moe_dispatch_combine_ms", moe.median * 1e3)
          .num("exchange_gbps", bytes / exchange.median / 1e9)
          .num("plain_gbps", bytes / plain.median / 1e9)
          .num("ratio_plain_over_exchange", plain.median / exchange.median)
          .num("ratio_2plain_over_moe", 2 * plain.median / moe.median).str("check", "ok");
      std::printf("%s\n", j.dump().c_str());
      std::fflush(stdout);
    }
  }
  return Status::OK();
}

}  // namespace moe::bench
