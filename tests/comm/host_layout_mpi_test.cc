// Layouts across hosts under mpirun, four ranks posing as two hosts through MOMOE_HOST_NAME (set
// per rank by the mpirun line in tests/comm/CMakeLists.txt: node-a node-b node-a node-b, the order
// mpirun --map-by node gives ranks over two hosts): host_name() reports the name, the HOSTS
// placement keeps EP 2 inside a host and puts DP across hosts, and EP 4 over both hosts exchanges
// its tokens in stages, bit for bit like the flat exchange, through real MPI collectives.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "comm/hierarchical_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/process_groups.h"
#include "tests/comm/hierarchical_checks.h"
#include "tests/testing/status_expect.h"

namespace moe::comm {
namespace {

std::unique_ptr<Communicator> world() {
  MpiOptions opts;
  opts.timeout_seconds = 60;
  StatusOr<std::unique_ptr<Communicator>> comm = MpiCommunicator::create_world(opts);
  EXPECT_TRUE(comm.ok()) << comm.status().to_string();
  return comm.ok() ? std::move(comm).value() : nullptr;
}

// The host the mpirun line gave world rank r.
std::string faked_host(int r) { return r % 2 == 0 ? "node-a" : "node-b"; }

// Skips unless this is the four-rank job with the faked host names.
#define SKIP_UNLESS_FOUR_FAKED_HOSTS(comm)                                                  \
  do {                                                                                      \
    if ((comm)->world_size() != 4 || std::getenv("MOMOE_HOST_NAME") == nullptr) {           \
      GTEST_SKIP() << "needs the 4 ranks with MOMOE_HOST_NAME set per rank (run by ctest)"; \
    }                                                                                       \
  } while (0)

TEST(HostLayoutMpiTest, EveryRankReportsItsFakedHost) {
  auto w = world();
  ASSERT_NE(w, nullptr);
  SKIP_UNLESS_FOUR_FAKED_HOSTS(w);
  EXPECT_EQ(host_name(), faked_host(w->rank()));
}

TEST(HostLayoutMpiTest, HostsPlacementKeepsEpInsideAHostAndDpAcross) {
  auto w = world();
  ASSERT_NE(w, nullptr);
  SKIP_UNLESS_FOUR_FAKED_HOSTS(w);
  ProcessGroupOptions opts;
  opts.ep_size = 2;
  opts.placement = Placement::kHosts;  // host names from host_name(): the environment's
  StatusOr<ProcessGroups> g = make_process_groups(w.get(), opts);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const int me = w->rank();
  EXPECT_EQ(g->ep_rank, me / 2);  // EP groups {0, 2} on node-a, {1, 3} on node-b
  EXPECT_EQ(g->dp_rank, me % 2);
  EXPECT_EQ(g->layout_world()->rank(), g->layout_rank());
  // Every member of my EP group is on my host: gather their names.
  StatusOr<std::vector<std::string>> names = g->ep->gather_bytes(host_name(), 0);
  ASSERT_TRUE(names.ok()) << names.status().to_string();
  if (g->ep_rank == 0) {
    for (const std::string& n : *names) EXPECT_EQ(n, faked_host(me));
  }
  // And every member of my DP group on another host.
  names = g->dp->gather_bytes(host_name(), 0);
  ASSERT_TRUE(names.ok()) << names.status().to_string();
  if (g->dp_rank == 0) {
    ASSERT_EQ(names->size(), 2u);
    EXPECT_NE((*names)[0], (*names)[1]);
  }
}

TEST(HostLayoutMpiTest, HierarchicalExchangeOverTwoHostsEqualsTheFlatOne) {
  auto w = world();
  ASSERT_NE(w, nullptr);
  SKIP_UNLESS_FOUR_FAKED_HOSTS(w);
  ProcessGroupOptions opts;
  opts.ep_size = 4;
  opts.placement = Placement::kHosts;
  opts.hierarchical_all_to_all = true;
  StatusOr<ProcessGroups> g = make_process_groups(w.get(), opts);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto* hier = dynamic_cast<HierarchicalCommunicator*>(g->ep.get());
  ASSERT_NE(hier, nullptr);
  EXPECT_EQ(hier->grid().hosts(), 2);
  EXPECT_EQ(hier->grid().per_host(), 2);
  // The flat exchange over the same ranks in the same (layout) order.
  EXPECT_OK(testing::check_hierarchical_matches_flat(*g->layout_world(), *g->ep, Device::host(),
                                                     2024, 3));
}

}  // namespace
}  // namespace moe::comm
