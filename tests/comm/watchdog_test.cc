// comm::Watchdog: an armed section that outlasts its bound, or a device error reported by any of
// its communicators, aborts every device communicator with a message naming the section; a
// section that finishes in time, or a disarmed watchdog, never does; only the thread-safe device
// hooks are called (never a host backend's poll_async_error or abort).
#include "comm/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm/local_communicator.h"

namespace moe::comm {
namespace {

using namespace std::chrono_literals;

// A communicator whose only behaviour is the asynchronous error and abort (what the watchdog uses).
class FakeDeviceComm final : public Communicator {
 public:
  int rank() const override { return 3; }
  int world_size() const override { return 4; }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  const char* backend_name() const override { return "fake"; }
  Status all_reduce(const TensorView&, const TensorView&, ReduceOp, Stream) override {
    return unused();
  }
  Status all_gather(const TensorView&, const TensorView&, Stream) override { return unused(); }
  Status reduce_scatter(const TensorView&, const TensorView&, ReduceOp, Stream) override {
    return unused();
  }
  Status broadcast(const TensorView&, int, Stream) override { return unused(); }
  Status all_to_all(const TensorView&, const TensorView&, Stream) override { return unused(); }
  Status all_to_all_v(const TensorView&, const AllToAllPlan&, const TensorView&, Stream) override {
    return unused();
  }
  Status barrier() override { return unused(); }
  StatusOr<std::vector<std::string>> gather_bytes(const std::string&, int) override {
    return unused();
  }
  StatusOr<std::string> broadcast_bytes(const std::string&, int) override { return unused(); }
  StatusOr<std::unique_ptr<Communicator>> split(int, int) override { return unused(); }
  void set_timeout(double) override {}
  Status poll_async_error() override { return unused(); }
  Status abort(const std::string&) override { return unused(); }
  Status poll_device_error() override {
    ++polls;
    return fail_polls.load() ? unavailable_error("nccl: remote process exited") : Status::OK();
  }
  void abort_device(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu);
    aborted = reason;
  }
  std::string abort_reason() {
    std::lock_guard<std::mutex> lock(mu);
    return aborted;
  }

  std::atomic<bool> fail_polls{false};
  std::atomic<int> polls{0};

 private:
  static Status unused() {
    ADD_FAILURE() << "the watchdog called a method that is not thread-safe";
    return internal_error("not used by the watchdog");
  }
  std::mutex mu;
  std::string aborted;
};

// Waits (up to 5 s) until the watchdog fired.
std::string wait_fired(const Watchdog& w) {
  for (int i = 0; i < 500 && w.fired().empty(); ++i) std::this_thread::sleep_for(10ms);
  return w.fired();
}

TEST(WatchdogTest, ASectionThatOutlastsTheTimeoutAbortsNamingIt) {
  FakeDeviceComm comm;
  Watchdog w({&comm}, /*timeout_seconds=*/0.1, /*poll_seconds=*/0.01);
  w.arm("step 12");
  const std::string why = wait_fired(w);
  ASSERT_FALSE(why.empty());
  EXPECT_NE(why.find("step 12 has not finished after"), std::string::npos) << why;
  EXPECT_NE(comm.abort_reason().find("step 12"), std::string::npos) << comm.abort_reason();
}

TEST(WatchdogTest, ADeviceErrorOnAnyCommunicatorAbortsThemAll) {
  FakeDeviceComm world, group;
  Watchdog w({&world, nullptr, &group}, /*timeout_seconds=*/600, /*poll_seconds=*/0.01);
  w.arm("step 3");
  while (group.polls.load() < 2) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(w.fired().empty());
  group.fail_polls = true;
  const std::string why = wait_fired(w);
  EXPECT_NE(why.find("step 3 failed on rank 3 (fake)"), std::string::npos) << why;
  EXPECT_NE(why.find("remote process exited"), std::string::npos) << why;
  EXPECT_FALSE(world.abort_reason().empty());
  EXPECT_FALSE(group.abort_reason().empty());
}

TEST(WatchdogTest, SectionsInTimeAndADisarmedWatchdogNeverFire) {
  FakeDeviceComm comm;
  {
    Watchdog w({&comm}, /*timeout_seconds=*/5.0, /*poll_seconds=*/0.01);  // ample under load
    for (int i = 0; i < 5; ++i) {
      w.arm("step");
      std::this_thread::sleep_for(20ms);
      w.disarm();
    }
    comm.fail_polls = true;  // errors are polled only while armed
    std::this_thread::sleep_for(300ms);
    EXPECT_TRUE(w.fired().empty()) << w.fired();
  }  // the destructor stops the thread promptly
  EXPECT_TRUE(comm.abort_reason().empty());
}

// A host backend has no device to abort: a watchdog over it never stops its collectives.
TEST(WatchdogTest, LeavesAHostBackendAlone) {
  std::vector<std::unique_ptr<Communicator>> world = LocalCommunicator::create_world(1);
  Watchdog w({world[0].get()}, /*timeout_seconds=*/0.05, /*poll_seconds=*/0.01);
  w.arm("step 1");
  ASSERT_FALSE(wait_fired(w).empty());
  EXPECT_TRUE(world[0]->barrier().ok());
}

}  // namespace
}  // namespace moe::comm
