// The hierarchical all-to-all on the Local backend, where the ranks of one process pose as several
// hosts (a host id per rank): its stage plans by hand, and its exchanges against the flat ones bit
// for bit on random plans at H = 2 hosts x L = 2 ranks, 2 x 3 and 3 x 2, with each host's ranks
// consecutive and round-robin.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/hierarchical_communicator.h"
#include "comm/local_communicator.h"
#include "tests/comm/hierarchical_checks.h"

namespace moe::comm {
namespace {

#define EXPECT_OK(expr)                     \
  do {                                      \
    const ::moe::Status _s = (expr);        \
    EXPECT_TRUE(_s.ok()) << _s.to_string(); \
  } while (0)

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
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
    return testing::check_hierarchical_matches_flat(c, *hier, Device::host(), 1234 + ranks, 4);
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

}  // namespace
}  // namespace moe::comm
