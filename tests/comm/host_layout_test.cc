// Layouts across hosts on the Local backend, where the ranks of one process pose as several hosts
// (each rank names its host): the HOSTS placement (which world ranks form EP and DP groups, what
// it refuses and how it says so), ProcessGroups under it with round-robin host names (mpirun
// --map-by node), and the hierarchical all-to-all: its stage plans by hand, and its exchanges
// against the flat ones bit for bit on random plans at H = 2 hosts x L = 2 ranks, 2 x 3 and 3 x 2,
// with each host's ranks consecutive and round-robin.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "comm/hierarchical_communicator.h"
#include "comm/local_communicator.h"
#include "comm/placement.h"
#include "comm/process_groups.h"
#include "tests/comm/collective_checks.h"
#include "tests/comm/hierarchical_checks.h"
#include "tests/testing/status_expect.h"

namespace moe::comm {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Host names for `hosts` hosts of `per_host` ranks: round-robin ("h0 h1 h0 h1", mpirun --map-by
// node) or consecutive ("h0 h0 h1 h1", --map-by slot).
std::vector<std::string> host_names(int hosts, int per_host, bool round_robin) {
  std::vector<std::string> names;
  for (int w = 0; w < hosts * per_host; ++w) {
    names.push_back("h" + std::to_string(round_robin ? w % hosts : w / per_host));
  }
  return names;
}

// ---- Host names ------------------------------------------------------------------------------

// MOMOE_HOST_NAME, when set and not empty, is the host a process reports (tests and containers).
TEST(HostNameTest, TheEnvironmentNamesTheHost) {
  ASSERT_EQ(::unsetenv("MOMOE_HOST_NAME"), 0);
  const std::string machine = host_name();
  ASSERT_EQ(::setenv("MOMOE_HOST_NAME", "node-x", 1), 0);
  EXPECT_EQ(host_name(), "node-x");
  ASSERT_EQ(::setenv("MOMOE_HOST_NAME", "", 1), 0);
  EXPECT_EQ(host_name(), machine);
  ASSERT_EQ(::unsetenv("MOMOE_HOST_NAME"), 0);
  EXPECT_EQ(host_name(), machine);
}

// ---- Placement -------------------------------------------------------------------------------

TEST(PlacementTest, RankOrderIsConsecutiveRanks) {
  StatusOr<RankLayout> l = place_ranks(6, 3, Placement::kRankOrder, {});
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_TRUE(l->is_rank_order());
  EXPECT_EQ(l->ep_group(0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(l->ep_group(1), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(l->dp_rank, (std::vector<int>{0, 0, 0, 1, 1, 1}));
}

TEST(PlacementTest, HostsKeepEpInsideAHostUnderRoundRobinRanks) {
  // mpirun --map-by node over two hosts: a b a b. EP 2 stays inside a host; DP spans hosts.
  StatusOr<RankLayout> l = place_ranks(4, 2, Placement::kHosts, {"a", "b", "a", "b"});
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->ep_group(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(l->ep_group(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(l->ep_rank, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(l->dp_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(l->world_rank_at, (std::vector<int>{0, 2, 1, 3}));
  EXPECT_FALSE(l->is_rank_order());
  // 3 hosts x 2 ranks round-robin, EP 2: one EP group per host, in the order of their first rank.
  l = place_ranks(6, 2, Placement::kHosts, host_names(3, 2, true));
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->ep_group(0), (std::vector<int>{0, 3}));
  EXPECT_EQ(l->ep_group(1), (std::vector<int>{1, 4}));
  EXPECT_EQ(l->ep_group(2), (std::vector<int>{2, 5}));
  // Consecutive ranks per host: the same layout as RANK_ORDER.
  l = place_ranks(8, 2, Placement::kHosts, host_names(2, 4, false));
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_TRUE(l->is_rank_order());
  // Hosts of unequal sizes, EP dividing each: still inside each host.
  l = place_ranks(6, 2, Placement::kHosts, {"a", "a", "a", "a", "b", "b"});
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->ep_group(2), (std::vector<int>{4, 5}));
}

TEST(PlacementTest, HostsGroupWholeHostsWhenEpSpansThem) {
  // 4 hosts x 2 ranks round-robin (h0 h1 h2 h3 h0 h1 h2 h3), EP 4: two whole hosts per group.
  StatusOr<RankLayout> l = place_ranks(8, 4, Placement::kHosts, host_names(4, 2, true));
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->ep_group(0), (std::vector<int>{0, 4, 1, 5}));
  EXPECT_EQ(l->ep_group(1), (std::vector<int>{2, 6, 3, 7}));
  StatusOr<std::vector<int>> hosts = hierarchical_hosts(*l, host_names(4, 2, true), 1);
  ASSERT_TRUE(hosts.ok()) << hosts.status().to_string();
  EXPECT_EQ(*hosts, (std::vector<int>{0, 0, 1, 1}));
  const std::string line = describe_layout(*l, Placement::kHosts, host_names(4, 2, true), true);
  EXPECT_TRUE(contains(line, "placement HOSTS: EP 4 x DP 2 on 4 host(s)")) << line;
  EXPECT_TRUE(contains(line, "[0 4 1 5] [2 6 3 7], over 2 hosts")) << line;
  EXPECT_TRUE(contains(line, "all-to-all hierarchical")) << line;
}

TEST(PlacementTest, HostsRefusalsNameTheCountsAndWhatToSet) {
  // EP 3 with 4 ranks per host (2 hosts): neither divides nor spans whole hosts.
  Status s = place_ranks(12, 3, Placement::kHosts, host_names(3, 4, true)).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "--ep 3 neither divides the 4 ranks of each host"))
      << s.to_string();
  EXPECT_TRUE(contains(s.message(), "h0: 4, h1: 4, h2: 4")) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "set --ep to one of 1, 2, 4 (EP inside each host)"))
      << s.to_string();
  EXPECT_TRUE(contains(s.message(), "or 12 (EP over whole hosts)")) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "parallel.placement = RANK_ORDER")) << s.to_string();
  // Unequal hosts and an EP that divides neither.
  s = place_ranks(6, 3, Placement::kHosts, {"a", "a", "a", "a", "b", "b"}).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "unequal numbers of ranks (a: 4, b: 2)")) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "set --ep to one of 1, 2")) << s.to_string();
  // The world's divisibility comes first, as under RANK_ORDER.
  s = place_ranks(6, 4, Placement::kHosts, host_names(2, 3, false)).status();
  EXPECT_TRUE(contains(s.message(), "world size 6 is not divisible by --ep 4")) << s.to_string();
}

TEST(PlacementTest, HierarchicalNeedsEpGroupsThatSpanHostsEvenly) {
  // EP inside a host: nothing to stage.
  const std::vector<std::string> rr = host_names(2, 2, true);
  StatusOr<RankLayout> inside = place_ranks(4, 2, Placement::kHosts, rr);
  ASSERT_TRUE(inside.ok());
  Status s = hierarchical_hosts(*inside, rr, 0).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "EP group of world rank 0 has h0: 2")) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "leave parallel.hierarchical_all_to_all off")) << s.to_string();
  // RANK_ORDER EP 3 over hosts a a b b b b: 2 + 1 ranks in the first group.
  StatusOr<RankLayout> uneven = place_ranks(6, 3, Placement::kRankOrder, {});
  ASSERT_TRUE(uneven.ok());
  s = hierarchical_hosts(*uneven, {"a", "a", "b", "b", "b", "b"}, 1).status();
  EXPECT_TRUE(contains(s.message(), "has a: 2, b: 1")) << s.to_string();
  // RANK_ORDER over consecutive hosts spans them evenly.
  StatusOr<std::vector<int>> ok = hierarchical_hosts(*uneven, host_names(3, 2, true), 0);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, (std::vector<int>{0, 1, 2}));
}

// ---- The stages of one exchange, by hand ----------------------------------------------------

// 4 ranks on hosts {0, 1} {2, 3}; rank s sends 4s + d + 1 rows to rank d. Rank 0 = (host 0,
// local 0) sends to its host's local 0 (itself) the rows for ranks 0 and 2: 1 + 3; to local 1 those
// for ranks 1 and 3: 2 + 4; it relays from local 1 (rank 1) the rows for ranks 0 and 2: 5 + 7.
// Between hosts it sends rank 2 (host 1, local 0) the rows of ranks 0 and 1 for rank 2: 3 + 7,
// keeps 1 + 5 for itself, and receives from rank 2 the rows of ranks 2 and 3 for rank 0: 9 + 13.
TEST(StagedAllToAllTest, PlansByHand) {
  StatusOr<HostGrid> grid = HostGrid::from_host_ids({7, 7, 9, 9});
  ASSERT_TRUE(grid.ok()) << grid.status().to_string();
  const auto counts = [](int s, int d) { return static_cast<int64_t>(4 * s + d + 1); };
  std::vector<std::vector<int64_t>> host(2, std::vector<int64_t>(4));
  std::vector<int64_t> send(4), recv(4);
  for (int d = 0; d < 4; ++d) {
    for (int l = 0; l < 2; ++l) host[l][d] = counts(l, d);
    send[d] = counts(0, d);
    recv[d] = counts(d, 0);
  }
  StatusOr<AllToAllPlan> flat = AllToAllPlan::from_counts(send, recv);
  ASSERT_TRUE(flat.ok());
  StatusOr<StagedAllToAll> s = stage_all_to_all(*flat, *grid, 0, host);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->intra.send_counts, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(s->intra.recv_counts, (std::vector<int64_t>{4, 12}));
  EXPECT_EQ(s->inter.send_counts, (std::vector<int64_t>{6, 10}));
  EXPECT_EQ(s->inter.recv_counts, (std::vector<int64_t>{6, 22}));
  // Packed by destination local rank, then host: rows of ranks 0, 2, 1, 3 (offsets 0, 3, 1, 6).
  ASSERT_EQ(s->pack.size(), 4u);
  EXPECT_EQ(s->pack[1].src, 3);  // rank 2's rows start after ranks 0 and 1's (1 + 2)
  EXPECT_EQ(s->pack[1].dst, 1);
  // Regrouped by destination host: local 0's 1 row for host 0 (at 0), local 1's 5 (at 4); then
  // local 0's 3 rows for host 1 (at 1), local 1's 7 (at 9).
  ASSERT_EQ(s->regroup.size(), 4u);
  EXPECT_EQ(s->regroup[1].src, 4);
  EXPECT_EQ(s->regroup[2].src, 1);
  EXPECT_EQ(s->regroup[3].src, 9);
  EXPECT_EQ(s->regroup[3].dst, 9);
  // A host's counts that contradict the plan are refused.
  host[0][1] += 1;
  EXPECT_EQ(stage_all_to_all(*flat, *grid, 0, host).status().code(), StatusCode::kInvalidArgument);
}

TEST(StagedAllToAllTest, GridsNeedSeveralEvenHosts) {
  StatusOr<HostGrid> g = HostGrid::from_host_ids({3, 1, 3, 1, 3, 1});
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->hosts(), 2);
  EXPECT_EQ(g->per_host(), 3);
  EXPECT_EQ(g->rank_at[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(g->local[4], 2);
  Status one = HostGrid::from_host_ids({0, 0, 0}).status();
  EXPECT_TRUE(contains(one.message(), "lie on 1 host(s) with [3] ranks")) << one.to_string();
  Status uneven = HostGrid::from_host_ids({0, 0, 1}).status();
  EXPECT_TRUE(contains(uneven.message(), "with [2, 1] ranks")) << uneven.to_string();
}

// ---- The hierarchical exchange against the flat one -------------------------------------------

struct GridCase {
  int hosts;
  int per_host;
  bool round_robin;
};

class HierarchicalAllToAllTest : public ::testing::TestWithParam<GridCase> {};

TEST_P(HierarchicalAllToAllTest, EqualsTheFlatExchangeBitForBit) {
  const GridCase g = GetParam();
  const int ranks = g.hosts * g.per_host;
  EXPECT_OK(run_local_ranks(ranks, [&](Communicator& c) -> Status {
    const int me = c.rank();
    std::vector<int> host_of_rank;
    for (int r = 0; r < ranks; ++r) {
      host_of_rank.push_back(g.round_robin ? r % g.hosts : r / g.per_host);
    }
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> copy, c.split(0, me));
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> hier,
                         HierarchicalCommunicator::create(std::move(copy), host_of_rank));
    MOE_RETURN_IF_ERROR(
        testing::check_hierarchical_matches_flat(c, *hier, Device::host(), 1234 + ranks, 4));
    return testing::check_reduce_scatter(*hier, Device::host());  // the flat group's
  }));
}

INSTANTIATE_TEST_SUITE_P(Grids, HierarchicalAllToAllTest,
                         ::testing::Values(GridCase{2, 2, false}, GridCase{2, 2, true},
                                           GridCase{2, 3, false}, GridCase{2, 3, true},
                                           GridCase{3, 2, false}, GridCase{3, 2, true}),
                         [](const ::testing::TestParamInfo<GridCase>& info) {
                           return std::to_string(info.param.hosts) + "hostsX" +
                                  std::to_string(info.param.per_host) +
                                  (info.param.round_robin ? "RoundRobin" : "Consecutive");
                         });

TEST(HierarchicalAllToAllTest, BadArgumentsFailTheHostsRanks) {
  EXPECT_OK(run_local_ranks(4, [&](Communicator& c) -> Status {
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> copy, c.split(0, c.rank()));
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> hier,
                         HierarchicalCommunicator::create(std::move(copy), {0, 0, 1, 1}));
    // Every rank of host 0 fails when rank 1 passes too many rows; host 1 passes none: both
    // hosts' ranks stop before the exchange between hosts.
    const bool bad = c.rank() == 1;
    const AllToAllPlan plan = AllToAllPlan::uniform(4, 1);
    Tensor in = Tensor::zeros({bad ? 5 : 4, 2}, DType::kF32);
    Tensor out = Tensor::zeros({4, 2}, DType::kF32);
    if (c.rank() < 2) {
      Status s = hier->all_to_all_v(in, plan, out);
      const std::string want = bad ? "must be [send_total 4" : "rank(s) 1 of this host";
      if (s.code() != StatusCode::kInvalidArgument || !contains(s.message(), want)) {
        return internal_error("rank ", c.rank(), " got ", s.to_string());
      }
    }
    // The communicator still works afterwards.
    Tensor good = Tensor::zeros({4, 2}, DType::kF32);
    return hier->all_to_all_v(good, plan, out);
  }));
}

// ---- Process groups under HOSTS ---------------------------------------------------------------

TEST(HostPlacementTest, RoundRobinHostsGiveEpInsideAHostAndDpAcross) {
  EXPECT_OK(run_local_ranks(4, [](Communicator& c) -> Status {
    ProcessGroupOptions opts;
    opts.ep_size = 2;
    opts.placement = Placement::kHosts;
    opts.host = host_names(2, 2, true)[c.rank()];  // h0 h1 h0 h1
    MOE_ASSIGN_OR_RETURN(ProcessGroups g, make_process_groups(&c, opts));
    const int me = c.rank();
    const int want_ep = me / 2, want_dp = me % 2;  // EP groups {0, 2} {1, 3}
    if (g.ep_rank != want_ep || g.dp_rank != want_dp || g.ep->rank() != want_ep ||
        g.dp->rank() != want_dp || g.layout_rank() != want_dp * 2 + want_ep) {
      return internal_error("rank ", me, " has ep ", g.ep_rank, " dp ", g.dp_rank);
    }
    if (g.ordered_world == nullptr || g.layout_world()->rank() != g.layout_rank() ||
        g.world_rank_at != std::vector<int>{0, 2, 1, 3}) {
      return internal_error("rank ", me, ": the world in layout order is wrong");
    }
    // The EP group's all_reduce sums the world ranks of one host: 0 + 2 or 1 + 3.
    Tensor x = Tensor::from_vector<float>({1}, {static_cast<float>(me)});
    MOE_RETURN_IF_ERROR(g.ep->all_reduce(x, x, ReduceOp::kSum));
    if (x.data<float>()[0] != static_cast<float>(me % 2 == 0 ? 2 : 4)) {
      return internal_error("rank ", me, ": the EP group is not its host");
    }
    if (!contains(g.description, "EP groups (world ranks) [0 2] [1 3], each inside one host")) {
      return internal_error("description: ", g.description);
    }
    return Status::OK();
  }));
}

TEST(HostPlacementTest, HierarchicalEpOverTwoHostsAndRefusalsOnEveryRank) {
  EXPECT_OK(run_local_ranks(4, [](Communicator& c) -> Status {
    ProcessGroupOptions opts;
    opts.ep_size = 4;
    opts.placement = Placement::kHosts;
    opts.hierarchical_all_to_all = true;
    opts.host = host_names(2, 2, true)[c.rank()];
    MOE_ASSIGN_OR_RETURN(ProcessGroups g, make_process_groups(&c, opts));
    auto* hier = dynamic_cast<HierarchicalCommunicator*>(g.ep.get());
    if (hier == nullptr || hier->grid().hosts() != 2 || g.ep_rank != g.layout_rank()) {
      return internal_error("rank ", c.rank(), ": EP 4 is not staged over 2 hosts");
    }
    // EP ranks are in layout order (host h0's ranks, then h1's): compare with the flat exchange
    // over the world in that order.
    MOE_RETURN_IF_ERROR(
        testing::check_hierarchical_matches_flat(*g.layout_world(), *g.ep, Device::host(), 99, 2));
    // EP 2 inside each host cannot be staged: every rank is told so (and no rank waits).
    opts.ep_size = 2;
    Status s = make_process_groups(&c, opts).status();
    if (s.code() != StatusCode::kInvalidArgument ||
        !contains(s.message(), "needs every EP group to span several hosts")) {
      return internal_error("rank ", c.rank(), ": ", s.to_string());
    }
    return Status::OK();
  }));
}

}  // namespace
}  // namespace moe::comm
