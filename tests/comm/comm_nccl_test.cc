// The NCCL backend: the shared conformance checks on device buffers, one rank per visible GPU
// (up to 4, as threads with a Local bootstrap). Skips cleanly where no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>

#include "base/context.h"
#include "comm/local_communicator.h"
#include "comm/nccl_communicator.h"
#include "tests/comm/collective_checks.h"
#include "tests/testing/cuda_device.h"

namespace moe::comm {
namespace {

#define MOE_SKIP_IF_NO_GPU() MOE_REQUIRE_CUDA_DEVICE()

int ranks() { return std::min(cuda_device_count(), 4); }

// Runs fn on an NCCL communicator per GPU, bootstrapped through a Local world.
Status run_nccl_ranks(const std::function<Status(Communicator&, Device)>& fn) {
  LocalOptions opts;
  opts.timeout_seconds = 120;
  return run_local_ranks(
      ranks(),
      [&](Communicator& local) -> Status {
        // The NCCL communicator owns its bootstrap: hand it a duplicate of this rank's Local world.
        MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> bootstrap, local.split(0, local.rank()));
        NcclOptions nccl_opts;
        nccl_opts.device = local.rank();
        MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> nccl,
                             NcclCommunicator::create(std::move(bootstrap), nccl_opts));
        if (nccl->memory_space() != MemorySpace::kDevice)
          return internal_error("not a device backend");
        return fn(*nccl, Device::cuda(local.rank()));
      },
      opts);
}

TEST(NcclCommunicatorTest, CreateWithoutAGpuFailsCleanly) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  auto world = LocalCommunicator::create_world(1);
  StatusOr<std::unique_ptr<Communicator>> nccl = NcclCommunicator::create(std::move(world[0]));
  EXPECT_EQ(nccl.status().code(), StatusCode::kFailedPrecondition) << nccl.status().to_string();
}

TEST(NcclCommunicatorTest, Collectives) {
  MOE_SKIP_IF_NO_GPU();
  Status s = run_nccl_ranks([](Communicator& c, Device d) -> Status {
    MOE_RETURN_IF_ERROR(testing::check_all_reduce(c, d));
    MOE_RETURN_IF_ERROR(testing::check_all_gather(c, d));
    MOE_RETURN_IF_ERROR(testing::check_reduce_scatter(c, d));
    MOE_RETURN_IF_ERROR(testing::check_reduction_order(c, d));
    MOE_RETURN_IF_ERROR(testing::check_broadcast(c, d));
    MOE_RETURN_IF_ERROR(testing::check_all_to_all(c, d));
    MOE_RETURN_IF_ERROR(testing::check_all_to_all_v(c, d));
    MOE_RETURN_IF_ERROR(testing::check_barrier(c));
    MOE_RETURN_IF_ERROR(testing::check_gather_bytes(c));
    return testing::check_broadcast_bytes(c);
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(NcclCommunicatorTest, SplitAndProcessGroups) {
  MOE_SKIP_IF_NO_GPU();
  Status s = run_nccl_ranks([](Communicator& c, Device d) -> Status {
    MOE_RETURN_IF_ERROR(testing::check_split(c, d));
    return testing::check_process_groups(c, d);
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(NcclCommunicatorTest, ArgumentErrorsAndHostViews) {
  MOE_SKIP_IF_NO_GPU();
  Status s = run_nccl_ranks([](Communicator& c, Device d) -> Status {
    MOE_RETURN_IF_ERROR(testing::check_argument_errors(c, d));
    // All-host views are control data: they go through the bootstrap (by design), synchronously.
    Tensor host = Tensor::from_vector<float>({4}, {1, 2, 3, static_cast<float>(c.rank())});
    MOE_RETURN_IF_ERROR(c.all_reduce(host, host, ReduceOp::kSum));
    const int n = c.world_size();
    const std::vector<float> want = {1.0f * n, 2.0f * n, 3.0f * n, n * (n - 1) / 2.0f};
    if (to_vector<float>(host) != want)
      return internal_error("host all_reduce through the bootstrap");
    // A host view mixed with a device view is an argument error.
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx, Context::cuda(d.index));
    MOE_ASSIGN_OR_RETURN(Tensor dev, ctx->zeros({4}, DType::kF32));
    Status bad = c.all_reduce(host, dev, ReduceOp::kSum);
    if (bad.code() != StatusCode::kInvalidArgument)
      return internal_error("mixed views: ", bad.to_string());
    return c.poll_async_error();
  });
  EXPECT_TRUE(s.ok()) << s.to_string();
}

}  // namespace
}  // namespace moe::comm
