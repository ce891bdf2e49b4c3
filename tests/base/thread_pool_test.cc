// The CPU thread pool: every index runs exactly once whatever the thread count, grain and range
// length; nested and concurrent calls run inline instead of deadlocking; blocked sums do not
// depend on the thread count; the default thread count divides the cores among a node's ranks.
#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

#include "base/context.h"

namespace moe {
namespace {

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    ParallelScope scope(&pool);
    for (int64_t n : {0, 1, 7, 1000, 100003}) {
      for (int64_t grain : {1, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        parallel_for(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LE(0, b);
          ASSERT_LT(b, e);
          ASSERT_LE(e, n);
          for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[i].load(), 1)
              << "threads " << threads << " n " << n << " grain " << grain << " index " << i;
        }
      }
    }
  }
}

TEST(ThreadPoolTest, UsesSeveralThreadsAndRangesRespectTheGrain) {
  ThreadPool pool(4);
  ParallelScope scope(&pool);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int64_t> shortest{1 << 30};
  for (int rep = 0; rep < 50 && ids.size() < 2; ++rep) {
    parallel_for(1 << 16, 256, [&](int64_t b, int64_t e) {
      if (e != (1 << 16)) {  // all but the last range are at least a grain long
        int64_t s = shortest.load();
        while (e - b < s && !shortest.compare_exchange_weak(s, e - b)) {
        }
      }
      volatile double sink = 0;
      for (int64_t i = b; i < e; ++i) sink = sink + static_cast<double>(i);
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
  }
  EXPECT_GE(ids.size(), 2u) << "a 4-thread pool ran every range on one thread";
  EXPECT_GE(shortest.load(), 256);
}

TEST(ThreadPoolTest, NestedCallsRunInlineInsideTheRegion) {
  ThreadPool pool(3);
  ParallelScope scope(&pool);
  EXPECT_FALSE(in_parallel_region());
  std::atomic<int64_t> total{0};
  parallel_for(64, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(in_parallel_region());
    for (int64_t i = b; i < e; ++i) {
      const std::thread::id outer = std::this_thread::get_id();
      parallel_for(100, 1, [&](int64_t b2, int64_t e2) {
        EXPECT_EQ(std::this_thread::get_id(), outer) << "a nested range left its thread";
        total.fetch_add(e2 - b2);
      });
    }
  });
  EXPECT_EQ(total.load(), 64 * 100);
  EXPECT_FALSE(in_parallel_region());
}

TEST(ThreadPoolTest, TwoCallersShareOnePoolWithoutDeadlock) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  auto caller = [&] {
    ParallelScope scope(&pool);
    for (int rep = 0; rep < 200; ++rep) {
      parallel_for(1000, 10, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 200 * 1000);
}

TEST(ThreadPoolTest, BlockedSumsAreTheSameBitsAtAnyThreadCount) {
  std::vector<double> x(100000);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = 1.0 / (1.0 + static_cast<double>(i % 977)) * ((i % 3) ? 1 : -1e-3);
  auto sum = [&](int threads) {
    ThreadPool pool(threads);
    ParallelScope scope(&pool);
    return blocked_sum<double>(static_cast<int64_t>(x.size()), 1024, [&](int64_t b, int64_t e) {
      double s = 0;
      for (int64_t i = b; i < e; ++i) s += x[i];
      return s;
    });
  };
  const double one = sum(1);
  for (int threads : {2, 3, 7}) EXPECT_EQ(sum(threads), one) << threads << " threads";
  EXPECT_NEAR(
      one,
      [&] {
        double s = 0;
        for (double v : x) s += v;
        return s;
      }(),
      1e-9 * std::abs(one));
}

TEST(ThreadPoolTest, OutsideAScopeEverythingRunsInline) {
  EXPECT_EQ(current_thread_pool(), nullptr);
  EXPECT_EQ(parallel_threads(), 1);
  int calls = 0;
  parallel_for(1 << 20, 1, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1 << 20);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPoolTest, HostContextsOwnAPoolOfTheRequestedSize) {
  ContextOptions o;
  o.threads = 3;
  std::unique_ptr<Context> ctx = Context::host(o);
  ASSERT_NE(ctx->thread_pool(), nullptr);
  EXPECT_EQ(ctx->threads(), 3);
  o.threads = 0;  // every core
  EXPECT_EQ(Context::host(o)->threads(), available_cores());
}

TEST(ThreadPoolTest, DefaultThreadsShareTheCoresAmongTheNodesRanks) {
  const int cores = available_cores();
  const unsigned machine = std::thread::hardware_concurrency();
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("MPI_LOCALNRANKS");
  unsetenv("SLURM_NTASKS_PER_NODE");
  EXPECT_EQ(default_threads(1), cores);
  EXPECT_EQ(default_threads(cores * 2), 1);  // never below one
  if (machine != 0 && static_cast<unsigned>(cores) >= machine) {
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    EXPECT_EQ(default_threads(1), std::max(1, cores / 2));
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  }
}

}  // namespace
}  // namespace moe
