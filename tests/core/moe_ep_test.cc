// The MoE layer's expert-parallel path on the Local backend (ranks as threads), at EP = 1 (no
// communicator, and a one-rank Local group), 2 and 4. The checks live in moe_ep_checks.h (the MPI
// test runs the same ones): dispatcher identities that need no tolerance, the layer at EP = R
// against R independent single-rank layers (1e-12 in f64), the deduplicating dispatch
// (max_ep_ranks > 0) against the plain one (bit for bit) and its exchange counters, global
// statistics against one rank holding every token, and a token-count mismatch reported on every
// rank instead of a hang.
#include <gtest/gtest.h>

#include <mutex>

#include "comm/local_communicator.h"
#include "tests/core/moe_ep_checks.h"
#include "tests/core/moe_layer_test_util.h"

namespace moe::testing {
namespace {

// Runs fn on every rank of a Local group of `ranks`; at one rank also with no communicator.
// Every rank's status is reported, not only the first failure.
void on_ranks(int ranks, const std::function<Status(comm::Communicator*)>& fn) {
  if (ranks == 1) {
    Status s = fn(nullptr);
    EXPECT_TRUE(s.ok()) << "no communicator: " << s.to_string();
  }
  std::mutex mu;
  std::vector<Status> results(ranks);
  Status world = comm::run_local_ranks(ranks, [&](comm::Communicator& c) -> Status {
    Status s = fn(&c);
    std::lock_guard<std::mutex> lock(mu);
    results[c.rank()] = s;
    return s;
  });
  for (int r = 0; r < ranks; ++r)
    EXPECT_TRUE(results[r].ok()) << "rank " << r << ": " << results[r].to_string();
  EXPECT_TRUE(world.ok()) << world.to_string();
}

class DispatchIdentityTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(DispatchIdentityTest, CombineOfDispatchIsKxAndRowsFollowTheHistogram) {
  const auto [ranks, dropless] = GetParam();
  MoeLayerConfig cfg = small_config();
  cfg.num_experts = 8;
  cfg.d_model = 5;
  cfg.dropless = dropless;
  cfg.capacity_factor = 8.0;  // C >= any load: nothing dropped, so the identity is exact
  on_ranks(ranks, [&](comm::Communicator* c) {
    return check_dispatch_identity(
        cfg, [&](int r) { return seeded_routing(r, 13, 8, 2); }, c);
  });
}

INSTANTIATE_TEST_SUITE_P(RanksAndModes, DispatchIdentityTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Bool()));

// The deduplicating dispatch delivers the same rows: every received row is its source token's,
// padding rows are zero and keyless, and combine(gather_back(dispatch(x))) == K x.
TEST_P(DispatchIdentityTest, DeduplicatedDispatchDeliversTheSameRows) {
  const auto [ranks, dropless] = GetParam();
  for (int64_t k : {2, 4}) {
    MoeLayerConfig cfg = small_config();
    cfg.num_experts = 8;
    cfg.top_k = k;
    cfg.d_model = 5;
    cfg.dropless = dropless;
    cfg.capacity_factor = 8.0;  // nothing dropped: the identity is exact
    cfg.max_ep_ranks = 2;       // the dispatcher deduplicates; the routing is the test's own
    on_ranks(ranks, [&](comm::Communicator* c) {
      return check_dispatch_identity(
          cfg, [&](int r) { return seeded_routing(r, 13, 8, k); }, c);
    });
  }
}

// Dropless counts that make the exchange uniform on some ranks and not on others: every rank must
// still take the same collective (a rank in all_to_all and a peer in all_to_all_v fail or hang).
TEST(DispatchIdentityTest, DroplessWithUniformCountsOnSomeRanksOnly) {
  for (int ranks : {2, 4}) {
    MoeLayerConfig cfg = small_config();
    cfg.num_experts = ranks;
    cfg.top_k = 1;
    cfg.dropless = true;
    on_ranks(ranks, [&](comm::Communicator* c) {
      return check_dispatch_identity(
          cfg, [&](int r) { return skewed_routing(r, ranks, 2); }, c);
    });
  }
}

class LayerEpTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// EP = R equals R independent single-rank layers holding every expert: capacity is per source
// rank and the balance loss per rank in both, so each rank's tokens meet the same experts.
TEST_P(LayerEpTest, MatchesIndependentSingleRankLayers) {
  const auto [variant, ranks] = GetParam();
  const MoeLayerConfig cfg = ep_variant(variant);
  std::mutex mu;
  int64_t dropped = 0;
  on_ranks(ranks, [&](comm::Communicator* c) {
    int64_t mine = 0;
    Status s = check_layer_matches_single_rank(cfg, 9, c, &mine);
    std::lock_guard<std::mutex> lock(mu);
    dropped += mine;
    return s;
  });
  if (variant == "capacity_drops") {
    EXPECT_GT(dropped, 0) << "the drop case dropped nothing";
  } else {
    EXPECT_EQ(dropped, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, LayerEpTest,
                         ::testing::Combine(::testing::ValuesIn(single_rank_variants()),
                                            ::testing::Values(1, 2, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
                           return std::get<0>(info.param) + "_ep" +
                                  std::to_string(std::get<1>(info.param));
                         });

class DedupEpTest : public ::testing::TestWithParam<std::tuple<int, bool, int64_t>> {};

// max_ep_ranks > 0: the deduplicated dispatch equals the plain one bit for bit (forward and every
// gradient), counts its exchange right, and the layer still matches single-rank layers.
TEST_P(DedupEpTest, MatchesThePlainDispatchAndCountsItsRows) {
  const auto [ranks, dropless, k] = GetParam();
  const MoeLayerConfig cfg = dedup_variant(dropless, k);
  std::mutex mu;
  ExchangeCounts total;
  on_ranks(ranks, [&](comm::Communicator* c) {
    ExchangeCounts mine;
    Status s = check_dedup_matches_plain(cfg, 16, c, &mine);
    std::lock_guard<std::mutex> lock(mu);
    total.sent += mine.sent;
    total.undeduplicated += mine.undeduplicated;
    return s;
  });
  if (ranks > 1) {
    // With several of each token's K experts on one rank, deduplication saves rows.
    EXPECT_GT(total.undeduplicated, total.sent);
    EXPECT_GT(total.sent, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(RanksModesTopK, DedupEpTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Bool(),
                                            ::testing::Values<int64_t>(2, 4)));

class GlobalStatsEpTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

// Global AC statistics and global-scope aux losses: EP = R equals one rank over all R*T tokens.
TEST_P(GlobalStatsEpTest, MatchesOneRankOverAllTokens) {
  const auto [variant, ranks] = GetParam();
  const MoeLayerConfig cfg = ep_variant(variant);
  on_ranks(ranks, [&](comm::Communicator* c) -> Status {
    if (c == nullptr) return Status::OK();  // needs a stats communicator
    return check_global_matches_all_tokens(cfg, 7, *c);
  });
}

INSTANTIATE_TEST_SUITE_P(Variants, GlobalStatsEpTest,
                         ::testing::Combine(::testing::ValuesIn(global_variants()),
                                            ::testing::Values(1, 2, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
                           return std::get<0>(info.param) + "_ep" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(LayerEpTest, MismatchedTokenCountsFailOnEveryRank) {
  for (int ranks : {2, 4}) {
    on_ranks(ranks, [](comm::Communicator* c) { return check_capacity_mismatch_reported(*c); });
  }
}

}  // namespace
}  // namespace moe::testing
