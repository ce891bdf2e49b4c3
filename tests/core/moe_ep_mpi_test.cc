// The MoE layer's expert-parallel path under mpirun with the MPI backend (EP = world size): the
// checks of moe_ep_checks.h, which the Local test runs with ranks as threads. Each rank compares
// its own results with expectations it computes alone (every rank's routing regenerated from
// seeds; single-rank layers over the same tokens, since every rank holds the global parameters).
#include <gtest/gtest.h>

#include "comm/mpi_communicator.h"
#include "tests/core/moe_ep_checks.h"
#include "tests/core/moe_layer_test_util.h"

namespace moe::testing {
namespace {

class MoeEpMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<comm::Communicator>> w = comm::MpiCommunicator::create_world({});
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    world_ = std::move(w).value();
    if (4 % world_->world_size() != 0) GTEST_SKIP() << "needs 1, 2 or 4 ranks (E = 4)";
  }
  std::unique_ptr<comm::Communicator> world_;
};

TEST_F(MoeEpMpiTest, DispatchIdentityAndHistogram) {
  for (bool dropless : {false, true}) {
    MoeLayerConfig cfg = small_config();
    cfg.num_experts = 8;
    cfg.d_model = 5;
    cfg.dropless = dropless;
    cfg.capacity_factor = 8.0;  // nothing dropped
    Status s = check_dispatch_identity(
        cfg, [](int r) { return seeded_routing(r, 13, 8, 2); }, world_.get());
    EXPECT_TRUE(s.ok()) << "dropless " << dropless << ": " << s.to_string();
  }
}

TEST_F(MoeEpMpiTest, DroplessWithUniformCountsOnSomeRanksOnly) {
  if (world_->world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int ranks = world_->world_size();
  MoeLayerConfig cfg = small_config();
  cfg.num_experts = ranks;
  cfg.top_k = 1;
  cfg.dropless = true;
  Status s = check_dispatch_identity(
      cfg, [&](int r) { return skewed_routing(r, ranks, 2); }, world_.get());
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_F(MoeEpMpiTest, LayerMatchesIndependentSingleRankLayers) {
  for (const std::string& variant : single_rank_variants()) {
    int64_t dropped = 0;
    Status s = check_layer_matches_single_rank(ep_variant(variant), 9, world_.get(), &dropped);
    EXPECT_TRUE(s.ok()) << variant << ": " << s.to_string();
    if (variant == "capacity_drops") {
      EXPECT_GE(dropped, 6) << "18 assignments for 4 experts x C = 3 slots";
    } else {
      EXPECT_EQ(dropped, 0) << variant;
    }
  }
}

TEST_F(MoeEpMpiTest, DeduplicatedDispatchMatchesThePlainOne) {
  for (bool dropless : {false, true}) {
    for (int64_t k : {2, 4}) {
      Status s = check_dedup_matches_plain(dedup_variant(dropless, k), 16, world_.get(), nullptr);
      EXPECT_TRUE(s.ok()) << "dropless " << dropless << ", top-k " << k << ": " << s.to_string();
    }
  }
}

TEST_F(MoeEpMpiTest, GlobalStatisticsMatchOneRankOverAllTokens) {
  for (const std::string& variant : global_variants()) {
    Status s = check_global_matches_all_tokens(ep_variant(variant), 7, *world_);
    EXPECT_TRUE(s.ok()) << variant << ": " << s.to_string();
  }
}

TEST_F(MoeEpMpiTest, MismatchedTokenCountsFailOnEveryRank) {
  if (world_->world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Status s = check_capacity_mismatch_reported(*world_);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

}  // namespace
}  // namespace moe::testing
