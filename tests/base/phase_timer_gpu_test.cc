// base/phase_timer.h on a GPU: phases are device time between CUDA events on the context's
// stream; collect() never waits (it does not count as a sync) and hands a phase the stream has
// not reached yet out with a later collect(). Skips without a CUDA device.
#include <gtest/gtest.h>

#include "base/context.h"
#include "base/phase_timer.h"
#include "tests/testing/cuda_device.h"

namespace moe {
namespace {

double at(const PhaseSecondsArray& p, Phase phase) { return p[static_cast<int>(phase)]; }

TEST(PhaseTimerGpuTest, DeviceTimeWithoutWaiting) {
  MOE_REQUIRE_CUDA_DEVICE();
  StatusOr<std::unique_ptr<Context>> ctx = Context::cuda(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  Context& c = **ctx;
  PhaseTimer timer(&c);
  c.set_phase_timer(&timer);
  StatusOr<Tensor> big = c.empty({int64_t{1} << 28}, DType::kF32);  // 1 GiB
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  {
    ScopedPhase forward(c, Phase::kForward);
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.zero(*big).ok());
  }
  ASSERT_TRUE(c.synchronize().ok());
  const int64_t syncs = c.sync_count();
  StatusOr<PhaseSecondsArray> p = timer.collect();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_GT(at(*p, Phase::kForward), 0);
  // Enqueued work, collected at once: either already timed or left for the next collect().
  timer.begin(Phase::kOptimizer);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(c.zero(*big).ok());
  timer.end(Phase::kOptimizer);
  p = timer.collect();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  const double first = at(*p, Phase::kOptimizer);
  EXPECT_EQ(c.sync_count(), syncs) << "collect() must not wait";
  ASSERT_TRUE(c.synchronize().ok());
  p = timer.collect();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_GT(first + at(*p, Phase::kOptimizer), 0);
  EXPECT_TRUE(first == 0 || at(*p, Phase::kOptimizer) == 0) << "an interval counted twice";
  c.set_phase_timer(nullptr);
}

}  // namespace
}  // namespace moe
