// Where the ranks of a job run (core/train/placement.h): a rank's place survives the trip through
// gather_bytes' text, ranks group into one memory pool per host (two hosts on one file system are
// two pools), and the placement and memory-check lines name every rank with its node-local rank.
#include "core/train/placement.h"

#include <gtest/gtest.h>

#include "tests/testing/status_expect.h"

namespace moe {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// A CPU rank on `host` with node-local rank `local` and `available` bytes left there.
RankPlace cpu_rank(const std::string& host, int local, int64_t available) {
  RankPlace p;
  p.host = host;
  p.node_local_rank = local;
  p.device = "the CPU";
  p.available_bytes = available;
  p.memory_key = host;
  p.memory_name = "host " + host;
  return p;
}

TEST(PlacementTest, ARankPlaceSurvivesItsText) {
  RankPlace gpu = cpu_rank("node-7", 3, 80 * kGiB);
  gpu.device = "cuda:3";
  gpu.memory_key = "node-7/0000:19:00.0";
  gpu.memory_name = "cuda:3 (NVIDIA H100 80GB HBM3 at 0000:19:00.0)";
  for (const RankPlace& p : {gpu, cpu_rank("a", -1, -1)}) {
    StatusOr<RankPlace> back = RankPlace::from_text(p.to_text());
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->host, p.host);
    EXPECT_EQ(back->node_local_rank, p.node_local_rank);
    EXPECT_EQ(back->device, p.device);
    EXPECT_EQ(back->available_bytes, p.available_bytes);
    EXPECT_EQ(back->memory_key, p.memory_key);
    EXPECT_EQ(back->memory_name, p.memory_name);
  }
}

TEST(PlacementTest, TextThatIsNoPlaceIsRefusedByName) {
  for (const std::string bad : {"", "a\t0\tthe CPU\t12\ta", "a\tx\tthe CPU\t12\ta\thost a",
                                "a\t0\tthe CPU\t12GiB\ta\thost a"}) {
    testing::expect_invalid(RankPlace::from_text(bad).status(),
                            {"a rank's place", "same momoe-train"});
  }
}

TEST(PlacementTest, TwoHostsAreTwoPools) {
  // EP 2 x DP 2 over two hosts: ranks 0, 1 on a and 2, 3 on b.
  const std::vector<MemoryPool> pools =
      memory_pools({cpu_rank("a", 0, 10 * kGiB), cpu_rank("a", 1, 9 * kGiB),
                    cpu_rank("b", 0, 20 * kGiB), cpu_rank("b", 1, 21 * kGiB)});
  ASSERT_EQ(pools.size(), 2u);
  EXPECT_EQ(pools[0].name, "host a");
  EXPECT_EQ(pools[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(pools[0].available, 9 * kGiB);  // the least any rank saw
  EXPECT_EQ(pools[1].name, "host b");
  EXPECT_EQ(pools[1].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(pools[1].available, 20 * kGiB);
}

TEST(PlacementTest, OneHostIsOnePoolAndAnUnknownAmountStaysUnknown) {
  const std::vector<MemoryPool> pools =
      memory_pools({cpu_rank("a", 0, 10 * kGiB), cpu_rank("a", 1, -1), cpu_rank("a", 2, 8 * kGiB)});
  ASSERT_EQ(pools.size(), 1u);
  EXPECT_EQ(pools[0].ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(pools[0].available, -1);
}

TEST(PlacementTest, TheLinesNameEveryRankItsHostAndNodeLocalRank) {
  const std::vector<RankPlace> places = {cpu_rank("a", 0, 2 * kGiB), cpu_rank("a", 1, 2 * kGiB),
                                         cpu_rank("b", 0, kGiB), cpu_rank("b", -1, kGiB)};
  EXPECT_EQ(placement_line(places),
            "momoe: placement: host a: rank 0 (node-local 0, the CPU), rank 1 (node-local 1, the "
            "CPU); host b: rank 2 (node-local 0, the CPU), rank 3 (node-local ?, the CPU)");
  std::vector<MemoryPool> pools = memory_pools(places);
  pools.push_back(MemoryPool{"host c", -1, {4}});
  EXPECT_EQ(memory_check_line(pools, kGiB / 4),
            "momoe: memory check: host a (ranks 0, 1): 2 x 0.25 GiB of 2.00 GiB available; host b "
            "(ranks 2, 3): 2 x 0.25 GiB of 1.00 GiB available; host c (rank 4): 1 x 0.25 GiB of "
            "an unknown amount available");
}

}  // namespace
}  // namespace moe
