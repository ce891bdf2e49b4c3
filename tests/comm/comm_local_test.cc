// The Local backend: the shared conformance checks on 1-4 ranks, plus what only an in-process
// backend can check exactly (timeouts naming the missing rank, abort propagation, rank-order
// reductions, cross-rank argument checks), AllToAllPlan, process-group validation and the
// unique-id bootstrap.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "comm/agree.h"
#include "comm/bootstrap.h"
#include "comm/local_communicator.h"
#include "comm/process_groups.h"
#include "tests/comm/collective_checks.h"
#include "tests/testing/status_expect.h"

namespace moe::comm {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Checks a status inside a rank's function and turns a mismatch into that rank's failure.
Status expect_status(const Status& s, StatusCode code, const std::string& part) {
  if (s.code() != code || !contains(s.message(), part)) {
    return internal_error("expected ", status_code_name(code), " containing '", part, "', got ",
                          s.to_string());
  }
  return Status::OK();
}

// ---- The conformance checks on 1, 2, 3 and 4 ranks -------------------------------------------

class LocalCollectiveTest : public ::testing::TestWithParam<int> {};

TEST_P(LocalCollectiveTest, AllReduce) {
  EXPECT_OK(run_local_ranks(
      GetParam(), [](Communicator& c) { return testing::check_all_reduce(c, Device::host()); }));
}
TEST_P(LocalCollectiveTest, AllGather) {
  EXPECT_OK(run_local_ranks(
      GetParam(), [](Communicator& c) { return testing::check_all_gather(c, Device::host()); }));
}
TEST_P(LocalCollectiveTest, ReduceScatter) {
  EXPECT_OK(run_local_ranks(GetParam(), [](Communicator& c) {
    MOE_RETURN_IF_ERROR(testing::check_reduce_scatter(c, Device::host()));
    return testing::check_reduction_order(c, Device::host());
  }));
}
TEST_P(LocalCollectiveTest, Broadcast) {
  EXPECT_OK(run_local_ranks(
      GetParam(), [](Communicator& c) { return testing::check_broadcast(c, Device::host()); }));
}
TEST_P(LocalCollectiveTest, AllToAll) {
  EXPECT_OK(run_local_ranks(
      GetParam(), [](Communicator& c) { return testing::check_all_to_all(c, Device::host()); }));
}
TEST_P(LocalCollectiveTest, AllToAllV) {
  EXPECT_OK(run_local_ranks(
      GetParam(), [](Communicator& c) { return testing::check_all_to_all_v(c, Device::host()); }));
}
TEST_P(LocalCollectiveTest, BarrierAndBytes) {
  EXPECT_OK(run_local_ranks(GetParam(), [](Communicator& c) {
    MOE_RETURN_IF_ERROR(testing::check_barrier(c));
    MOE_RETURN_IF_ERROR(testing::check_gather_bytes(c));
    return testing::check_broadcast_bytes(c);
  }));
}
TEST_P(LocalCollectiveTest, Split) {
  EXPECT_OK(run_local_ranks(
      GetParam(), [](Communicator& c) { return testing::check_split(c, Device::host()); }));
}
TEST_P(LocalCollectiveTest, ProcessGroups) {
  EXPECT_OK(run_local_ranks(GetParam(), [](Communicator& c) {
    return testing::check_process_groups(c, Device::host());
  }));
}
TEST_P(LocalCollectiveTest, ArgumentErrors) {
  EXPECT_OK(run_local_ranks(GetParam(), [](Communicator& c) {
    return testing::check_argument_errors(c, Device::host());
  }));
}
TEST_P(LocalCollectiveTest, EverythingInOneSequence) {
  EXPECT_OK(run_local_ranks(GetParam(),
                            [](Communicator& c) { return testing::check_all(c, Device::host()); }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalCollectiveTest, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "np" + std::to_string(info.param);
                         });

// ---- What only the Local backend guarantees ----------------------------------------------------

TEST(LocalCommunicatorTest, SumsInRankOrderBitExactly) {
  const int n = 4;
  const int64_t count = 1000;
  auto value = [](int r, int64_t i) {
    return 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(i);
  };
  std::vector<float> expected(count);
  for (int64_t i = 0; i < count; ++i) {
    float acc = value(0, i);
    for (int r = 1; r < n; ++r) acc += value(r, i);  // ((x0 + x1) + x2) + x3 in f32
    expected[i] = acc;
  }
  for (int repeat = 0; repeat < 3; ++repeat) {
    EXPECT_OK(run_local_ranks(n, [&](Communicator& c) -> Status {
      Tensor x = Tensor::empty({count}, DType::kF32);
      for (int64_t i = 0; i < count; ++i) x.data<float>()[i] = value(c.rank(), i);
      MOE_RETURN_IF_ERROR(c.all_reduce(x, x, ReduceOp::kSum));
      for (int64_t i = 0; i < count; ++i) {
        if (x.data<float>()[i] != expected[i]) return internal_error("element ", i, " differs");
      }
      return Status::OK();
    }));
  }
}

// Rank 1 skips the barrier and arrives only once ranks 0 and 2 have seen it time out; ranks 0 and
// 2 meet before they enter it, so that rank 1 is the only one missing. Events, not sleeps, so the
// order holds on a loaded machine. The barrier waits at least the timeout, and ends long before
// the default one (300 s): 60 x 0.5 s = 30 s is the bound, so the check sees a timeout that was
// ignored, not a slow machine.
TEST(LocalCommunicatorTest, TimeoutNamesTheRankThatDidNotArrive) {
  LocalOptions opts;
  opts.timeout_seconds = 0.5;
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;      // ranks 0 and 2 about to enter the barrier
  int timed_out = 0;  // ranks 0 and 2 whose barrier has returned
  const auto start = std::chrono::steady_clock::now();
  EXPECT_OK(run_local_ranks(
      3,
      [&](Communicator& c) -> Status {
        if (c.rank() == 1) {
          // Arrives late: the group is broken by then. Bounded, so that a barrier that never times
          // out fails here (rank 1's barrier then releases the others) instead of hanging.
          std::unique_lock<std::mutex> lock(mu);
          if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return timed_out == 2; })) {
            lock.unlock();
            c.barrier().ignore_error();
            return internal_error("ranks 0 and 2 did not time out within 60 s");
          }
          lock.unlock();
          return expect_status(c.barrier(), StatusCode::kUnavailable, "earlier timeout");
        }
        {
          std::unique_lock<std::mutex> lock(mu);
          ++ready;
          cv.notify_all();
          cv.wait(lock, [&] { return ready == 2; });
        }
        Status s = c.barrier();
        {
          std::lock_guard<std::mutex> lock(mu);
          ++timed_out;
        }
        cv.notify_all();
        MOE_RETURN_IF_ERROR(
            expect_status(s, StatusCode::kUnavailable, "waiting for rank 1 to arrive"));
        MOE_RETURN_IF_ERROR(expect_status(s, StatusCode::kUnavailable, "barrier"));
        return expect_status(c.poll_async_error(), StatusCode::kUnavailable, "rank 1");
      },
      opts));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(seconds, opts.timeout_seconds);
  EXPECT_LT(seconds, 60 * opts.timeout_seconds);
}

TEST(LocalCommunicatorTest, TimeoutInASubGroupNamesTheWorldRank) {
  LocalOptions opts;
  opts.timeout_seconds = 0.3;
  EXPECT_OK(run_local_ranks(
      4,
      [](Communicator& c) -> Status {
        MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> odd, c.split(c.rank() % 2, c.rank()));
        if (c.rank() % 2 == 0) return Status::OK();
        if (c.rank() == 3)
          return Status::OK();  // world rank 3 = rank 1 of the odd group never comes
        return expect_status(odd->barrier(), StatusCode::kUnavailable, "rank 1 (world rank 3)");
      },
      opts));
}

TEST(LocalCommunicatorTest, AbortReleasesWaitingAndFutureCallsOnEveryRank) {
  EXPECT_OK(run_local_ranks(3, [](Communicator& c) -> Status {
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, c.split(0, c.rank()));
    if (c.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      MOE_RETURN_IF_ERROR(c.abort("loss is NaN"));
    } else {
      // Waits for rank 2, which aborts instead of arriving.
      MOE_RETURN_IF_ERROR(expect_status(c.barrier(), StatusCode::kAborted, "loss is NaN"));
    }
    Tensor x = Tensor::zeros({3}, DType::kF32);
    MOE_RETURN_IF_ERROR(expect_status(c.all_reduce(x, x, ReduceOp::kSum), StatusCode::kAborted,
                                      "aborted by world rank 2"));
    // Groups split from the world are aborted too.
    MOE_RETURN_IF_ERROR(expect_status(sub->barrier(), StatusCode::kAborted, "loss is NaN"));
    return expect_status(c.poll_async_error(), StatusCode::kAborted, "loss is NaN");
  }));
}

TEST(LocalCommunicatorTest, MismatchedCollectivesFailOnEveryRank) {
  EXPECT_OK(run_local_ranks(2, [](Communicator& c) -> Status {
    Tensor x = Tensor::zeros({4}, DType::kF32);
    Status s = c.rank() == 0 ? c.all_reduce(x, x, ReduceOp::kSum) : c.broadcast(x, 0);
    MOE_RETURN_IF_ERROR(expect_status(s, StatusCode::kInvalidArgument, "collective mismatch"));
    return c.barrier();  // still in step afterwards
  }));
}

TEST(LocalCommunicatorTest, OneRanksBadArgumentsFailEveryRankWithoutHanging) {
  EXPECT_OK(run_local_ranks(3, [](Communicator& c) -> Status {
    Tensor in = Tensor::zeros({4}, DType::kF32);
    Tensor out = Tensor::zeros({c.rank() == 1 ? 5 : 4}, DType::kF32);
    Status s = c.all_reduce(in, out, ReduceOp::kSum);
    return expect_status(s, StatusCode::kInvalidArgument,
                         c.rank() == 1 ? "element count" : "rank 1 passed");
  }));
}

TEST(LocalCommunicatorTest, DisagreeingPlansAreReportedOnEveryRank) {
  EXPECT_OK(run_local_ranks(2, [](Communicator& c) -> Status {
    // Rank 0 sends 2 rows to rank 1, but rank 1 expects 3.
    std::vector<int64_t> send =
        c.rank() == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 1};
    std::vector<int64_t> recv =
        c.rank() == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{3, 1};
    MOE_ASSIGN_OR_RETURN(AllToAllPlan plan, AllToAllPlan::from_counts(send, recv));
    Tensor in = Tensor::zeros({plan.send_total, 2}, DType::kF32);
    Tensor out = Tensor::zeros({plan.recv_total, 2}, DType::kF32);
    return expect_status(c.all_to_all_v(in, plan, out), StatusCode::kInvalidArgument,
                         "rank 0 sends 2 rows to rank 1, which expects 3");
  }));
}

// agree(): every rank gets one verdict, the same bytes and code everywhere, the first failed
// rank's code, each distinct message once with the ranks that reported it; marked job-wide.
TEST(AgreeTest, EveryRankGetsTheSameVerdictOncePerMessage) {
  EXPECT_OK(run_local_ranks(6, [](Communicator& c) -> Status {
    Status mine;
    if (c.rank() == 1 || c.rank() == 2 || c.rank() == 3 || c.rank() == 5) {
      mine = invalid_argument_error("train.batch_size 8 does not divide");
    }
    if (c.rank() == 4) mine = not_found_error("no file x on this host");
    const Status v = agree(&c, mine);
    const std::string want =
        "ranks 1-3, 5: train.batch_size 8 does not divide; "
        "rank 4: NOT_FOUND: no file x on this host";
    if (v.code() != StatusCode::kInvalidArgument || v.message() != want || !v.job_wide()) {
      return internal_error("rank ", c.rank(), " got ", v.to_string(), " (job-wide ", v.job_wide(),
                            ")");
    }
    return Status::OK();
  }));
}

TEST(AgreeTest, OneMessageFromEveryRankIsNamedOnceAndOkStaysOk) {
  EXPECT_OK(run_local_ranks(3, [](Communicator& c) -> Status {
    MOE_RETURN_IF_ERROR(agree(&c, Status::OK()));
    const Status v = agree(&c, failed_precondition_error("refused"));
    if (v.message() != "every rank: refused" || v.code() != StatusCode::kFailedPrecondition ||
        !v.job_wide()) {
      return internal_error("rank ", c.rank(), " got ", v.to_string());
    }
    const Status pair = agree(&c, c.rank() == 1 ? Status::OK() : data_loss_error("torn"));
    if (pair.message() != "ranks 0, 2: torn") {
      return internal_error("rank ", c.rank(), " got ", pair.to_string());
    }
    return Status::OK();
  }));
  const Status alone = agree(nullptr, invalid_argument_error("x"));
  EXPECT_TRUE(alone.job_wide());
  EXPECT_EQ(alone.to_string(), "INVALID_ARGUMENT: x");
  EXPECT_FALSE(invalid_argument_error("x").job_wide());
  EXPECT_TRUE(alone.with_context("ctx").job_wide());
}

TEST(LocalCommunicatorTest, DeviceViewsAreRejected) {
  EXPECT_OK(run_local_ranks(1, [](Communicator& c) -> Status {
    TensorView device_view(reinterpret_cast<void*>(64), DType::kF32, {4}, Device::cuda(0));
    return expect_status(c.broadcast(device_view, 0), StatusCode::kInvalidArgument, "host memory");
  }));
}

TEST(LocalCommunicatorTest, RunLocalRanksReportsTheFailingRankAndReleasesThePeers) {
  const auto start = std::chrono::steady_clock::now();
  Status s = run_local_ranks(3, [](Communicator& c) -> Status {
    if (c.rank() == 2) return data_loss_error("shard 7 is truncated");
    return c.barrier();  // released by the abort, not by the 300 s timeout
  });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "rank 2: shard 7 is truncated");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(LocalCommunicatorTest, QueriesAndWorldRanks) {
  auto world = LocalCommunicator::create_world(3);
  ASSERT_EQ(world.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(world[r]->rank(), r);
    EXPECT_EQ(world[r]->world_size(), 3);
    EXPECT_EQ(world[r]->memory_space(), MemorySpace::kHost);
    EXPECT_STREQ(world[r]->backend_name(), "local");
    EXPECT_OK(world[r]->poll_async_error());
  }
}

// ---- AllToAllPlan --------------------------------------------------------------------------

TEST(AllToAllPlanTest, OffsetsAreExclusivePrefixSums) {
  StatusOr<AllToAllPlan> plan = AllToAllPlan::from_counts({3, 0, 2}, {1, 4, 0});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->send_offsets, (std::vector<int64_t>{0, 3, 3}));
  EXPECT_EQ(plan->recv_offsets, (std::vector<int64_t>{0, 1, 5}));
  EXPECT_EQ(plan->send_total, 5);
  EXPECT_EQ(plan->recv_total, 5);
  EXPECT_EQ(plan->world_size(), 3);
  EXPECT_FALSE(plan->is_uniform());
  EXPECT_EQ(plan->to_string(), "send [3 0 2] recv [1 4 0]");
}

TEST(AllToAllPlanTest, TransposedSwapsSendAndReceive) {
  AllToAllPlan plan = *AllToAllPlan::from_counts({3, 0, 2}, {1, 4, 0});
  AllToAllPlan t = plan.transposed();
  EXPECT_EQ(t.send_counts, plan.recv_counts);
  EXPECT_EQ(t.send_offsets, plan.recv_offsets);
  EXPECT_EQ(t.recv_counts, plan.send_counts);
  EXPECT_EQ(t.recv_offsets, plan.send_offsets);
  EXPECT_EQ(t.send_total, plan.recv_total);
  EXPECT_EQ(t.recv_total, plan.send_total);
  EXPECT_EQ(t.transposed().send_counts, plan.send_counts);
}

TEST(AllToAllPlanTest, WithoutLeavesOneRanksRowsOutAndKeepsThePlacesOfTheRest) {
  AllToAllPlan plan = *AllToAllPlan::from_counts({3, 1, 2}, {1, 4, 2});
  AllToAllPlan w = plan.without(1);
  EXPECT_EQ(w.send_counts, (std::vector<int64_t>{3, 0, 2}));
  EXPECT_EQ(w.recv_counts, (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(w.send_offsets, plan.send_offsets);
  EXPECT_EQ(w.recv_offsets, plan.recv_offsets);
  EXPECT_EQ(w.send_total, plan.send_total);
  EXPECT_EQ(w.recv_total, plan.recv_total);
  EXPECT_EQ(plan.without(3).send_counts, plan.send_counts);  // no such rank: unchanged
}

TEST(AllToAllPlanTest, Uniform) {
  AllToAllPlan plan = AllToAllPlan::uniform(4, 6);
  EXPECT_TRUE(plan.is_uniform());
  EXPECT_EQ(plan.send_offsets, (std::vector<int64_t>{0, 6, 12, 18}));
  EXPECT_EQ(plan.recv_total, 24);
}

TEST(AllToAllPlanTest, FromCountsErrors) {
  EXPECT_EQ(AllToAllPlan::from_counts({1, 2}, {1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(AllToAllPlan::from_counts({}, {}).status().code(), StatusCode::kInvalidArgument);
  Status negative = AllToAllPlan::from_counts({1, -2}, {1, 1}).status();
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(negative.message(), "negative count for rank 1")) << negative.to_string();
}

// ---- Process groups --------------------------------------------------------------------------

TEST(ProcessGroupsTest, InvalidEpSizes) {
  EXPECT_OK(run_local_ranks(6, [](Communicator& c) -> Status {
    MOE_RETURN_IF_ERROR(expect_status(make_process_groups(&c, 4).status(),
                                      StatusCode::kInvalidArgument,
                                      "world size 6 is not divisible by --ep 4"));
    MOE_RETURN_IF_ERROR(expect_status(make_process_groups(&c, 0).status(),
                                      StatusCode::kInvalidArgument, "--ep 0 must be >= 1"));
    MOE_RETURN_IF_ERROR(expect_status(make_process_groups(&c, 12).status(),
                                      StatusCode::kInvalidArgument,
                                      "--ep 12 is larger than the world size 6"));
    // The world is still in step: a valid layout works afterwards. 6 = EP 3 x DP 2.
    MOE_ASSIGN_OR_RETURN(ProcessGroups g, make_process_groups(&c, 3));
    if (g.ep_size != 3 || g.dp_size != 2 || g.ep_rank != c.rank() % 3 ||
        g.dp_rank != c.rank() / 3) {
      return internal_error("wrong layout");
    }
    return testing::check_process_groups(c, Device::host());
  }));
  EXPECT_EQ(make_process_groups(nullptr, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(ProcessGroupsTest, ValidateExpertSplit) {
  EXPECT_OK(validate_expert_split(8, 4));
  EXPECT_OK(validate_expert_split(6, 1));
  Status s = validate_expert_split(6, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "num_experts 6 is not divisible by ep 4");
  EXPECT_EQ(validate_expert_split(0, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(validate_expert_split(4, 0).code(), StatusCode::kInvalidArgument);
}

// ---- Bootstrap -------------------------------------------------------------------------------

TEST(BootstrapTest, EveryRankGetsTheRootsId) {
  std::atomic<int> calls{0};
  EXPECT_OK(run_local_ranks(3, [&](Communicator& c) -> Status {
    auto make_id = [&]() -> StatusOr<std::string> {
      ++calls;
      return std::string("\x01\x00id-of-16-bytes", 16);
    };
    MOE_ASSIGN_OR_RETURN(std::string id, broadcast_unique_id(c, make_id, 16, /*root=*/1));
    if (id != std::string("\x01\x00id-of-16-bytes", 16)) return internal_error("wrong id");
    return Status::OK();
  }));
  EXPECT_EQ(calls.load(), 1);
}

TEST(BootstrapTest, RootFailureReachesEveryRank) {
  EXPECT_OK(run_local_ranks(3, [](Communicator& c) -> Status {
    auto make_id = []() -> StatusOr<std::string> { return internal_error("no network"); };
    Status s = broadcast_unique_id(c, make_id, 16).status();
    MOE_RETURN_IF_ERROR(expect_status(s, StatusCode::kInternal, "no network"));
    auto short_id = []() -> StatusOr<std::string> { return std::string("abc"); };
    return expect_status(broadcast_unique_id(c, short_id, 16).status(), StatusCode::kInternal,
                         "3 bytes, expected 16");
  }));
}

}  // namespace
}  // namespace moe::comm
