// The MPI backend under mpirun (-np 2 and -np 4): the shared conformance checks through real
// MPI collectives, the derived-datatype and chunking paths (with a lowered count limit), a
// bounded wait when one rank skips a collective, and runtime/bootstrap behaviour. abort() is not
// tested here: MPI_Abort ends the whole job.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/mpi_communicator.h"
#include "comm/process_groups.h"
#include "tests/comm/collective_checks.h"
#include "tests/testing/status_expect.h"

namespace moe::comm {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// A fresh duplicate of MPI_COMM_WORLD (collective); aborts the test binary if MPI is broken.
std::unique_ptr<Communicator> world(MpiOptions opts = {}) {
  if (opts.timeout_seconds == MpiOptions{}.timeout_seconds) opts.timeout_seconds = 60;
  StatusOr<std::unique_ptr<Communicator>> comm = MpiCommunicator::create_world(opts);
  EXPECT_TRUE(comm.ok()) << comm.status().to_string();
  return comm.ok() ? std::move(comm).value() : nullptr;
}

TEST(MpiCommunicatorTest, Queries) {
  auto comm = world();
  ASSERT_NE(comm, nullptr);
  int rank = -1, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->world_size(), size);
  EXPECT_EQ(comm->memory_space(), MemorySpace::kHost);
  EXPECT_STREQ(comm->backend_name(), "mpi");
  EXPECT_OK(comm->poll_async_error());
}

TEST(MpiCommunicatorTest, AllReduce) {
  EXPECT_OK(testing::check_all_reduce(*world(), Device::host()));
}
TEST(MpiCommunicatorTest, AllGather) {
  EXPECT_OK(testing::check_all_gather(*world(), Device::host()));
}
TEST(MpiCommunicatorTest, ReduceScatter) {
  EXPECT_OK(testing::check_reduce_scatter(*world(), Device::host()));
}
TEST(MpiCommunicatorTest, ReductionsInRankOrder) {
  EXPECT_OK(testing::check_reduction_order(*world(), Device::host()));
}
TEST(MpiCommunicatorTest, Broadcast) {
  EXPECT_OK(testing::check_broadcast(*world(), Device::host()));
}
TEST(MpiCommunicatorTest, AllToAll) {
  EXPECT_OK(testing::check_all_to_all(*world(), Device::host()));
}
TEST(MpiCommunicatorTest, AllToAllV) {
  EXPECT_OK(testing::check_all_to_all_v(*world(), Device::host()));
}
TEST(MpiCommunicatorTest, Barrier) { EXPECT_OK(testing::check_barrier(*world())); }
TEST(MpiCommunicatorTest, GatherBytes) { EXPECT_OK(testing::check_gather_bytes(*world())); }
TEST(MpiCommunicatorTest, BroadcastBytes) { EXPECT_OK(testing::check_broadcast_bytes(*world())); }
TEST(MpiCommunicatorTest, Split) { EXPECT_OK(testing::check_split(*world(), Device::host())); }
TEST(MpiCommunicatorTest, ProcessGroups) {
  EXPECT_OK(testing::check_process_groups(*world(), Device::host()));
}
TEST(MpiCommunicatorTest, ArgumentErrors) {
  EXPECT_OK(testing::check_argument_errors(*world(), Device::host()));
}

// With a count limit of 16, every buffer above 16 bytes travels as a derived datatype (blocks of
// 16 bytes plus a remainder), all_reduce runs in chunks of 16 elements, rows of all_to_all_v are
// wider than the limit, and gather_bytes takes its padded path.
TEST(MpiCommunicatorTest, LargeCountPathsWithALoweredLimit) {
  MpiOptions opts;
  opts.max_count = 16;
  auto comm = world(opts);
  ASSERT_NE(comm, nullptr);
  EXPECT_OK(testing::check_all(*comm, Device::host()));
}

TEST(MpiCommunicatorTest, RepeatedSumsAreBitIdentical) {
  auto comm = world();
  ASSERT_NE(comm, nullptr);
  const int64_t count = 513;
  std::vector<float> first;
  for (int repeat = 0; repeat < 3; ++repeat) {
    Tensor x = Tensor::empty({count}, DType::kF32);
    for (int64_t i = 0; i < count; ++i) x.data<float>()[i] = 0.1f * (comm->rank() + 1) + 1e-3f * i;
    ASSERT_TRUE(comm->all_reduce(x, x, ReduceOp::kSum).ok());
    std::vector<float> got = to_vector<float>(x);
    if (repeat == 0) first = got;
    EXPECT_EQ(got, first) << "repeat " << repeat;
  }
}

TEST(MpiCommunicatorTest, SkippedCollectiveTimesOutAndBreaksTheCommunicator) {
  auto control = world();
  MpiOptions opts;
  opts.timeout_seconds = 1.0;
  auto comm = world(opts);
  ASSERT_NE(control, nullptr);
  ASSERT_NE(comm, nullptr);
  const auto start = std::chrono::steady_clock::now();
  if (comm->rank() != 1) {
    Status s = comm->barrier();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    // The message names the rank that did not arrive (MPI itself cannot tell).
    EXPECT_TRUE(contains(s.message(), "barrier (collective #1) timed out after 1 s"))
        << s.to_string();
    EXPECT_TRUE(contains(s.message(), "rank(s) 1 did not arrive")) << s.to_string();
    if (comm->world_size() > 2) {
      EXPECT_TRUE(contains(s.message(), "waited too")) << s.to_string();
    }
    EXPECT_EQ(comm->poll_async_error().code(), StatusCode::kUnavailable);
    Status later = comm->broadcast_bytes("x", 0).status();
    EXPECT_EQ(later.code(), StatusCode::kUnavailable);
    EXPECT_TRUE(contains(later.message(), "earlier timeout")) << later.to_string();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
    EXPECT_OK(control->barrier());
  } else {
    EXPECT_OK(control->barrier());  // until every peer has timed out
    EXPECT_OK(comm->barrier());     // arrives late: completes the peers' pending barrier
  }
  EXPECT_OK(control->barrier());
}

TEST(MpiCommunicatorTest, InvalidLayoutsAreRejectedOnEveryRank) {
  auto comm = world();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(make_process_groups(comm.get(), 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(make_process_groups(comm.get(), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_OK(comm->barrier());
}

TEST(MpiCommunicatorTest, BootstrapBroadcastsTheRootsId) {
  auto comm = world();
  ASSERT_NE(comm, nullptr);
  const int root = comm->world_size() - 1;
  auto make_id = [&]() -> StatusOr<std::string> { return std::string(128, '\x7f'); };
  StatusOr<std::string> id = broadcast_unique_id(*comm, make_id, 128, root);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  EXPECT_EQ(*id, std::string(128, '\x7f'));
}

TEST(MpiRuntimeTest, ToleratesAnAlreadyInitialisedMpi) {
  StatusOr<std::unique_ptr<MpiRuntime>> again = MpiRuntime::init(nullptr, nullptr);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_FALSE((*again)->owns_mpi());
  again.value().reset();  // must not finalise MPI
  int finalized = 1;
  MPI_Finalized(&finalized);
  EXPECT_EQ(finalized, 0);
}

}  // namespace
}  // namespace moe::comm
