// base/phase_timer.h on the host: phases are the host time between begin and end, nested
// phases overlap their parent, host seconds add, collect() hands each interval out once, and a
// phase begun twice or ended unopened is a programmer error. ScopedPhase does nothing on a
// context without a timer. (phase_timer_gpu_test.cc: CUDA events, never waiting.)
#include "base/phase_timer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "base/context.h"

namespace moe {
namespace {

using namespace std::chrono_literals;

double at(const PhaseSecondsArray& p, Phase phase) { return p[static_cast<int>(phase)]; }

TEST(PhaseTimerTest, NestedPhasesHostSecondsAndCollectOnce) {
  std::unique_ptr<Context> ctx = Context::host();
  PhaseTimer timer(ctx.get());
  ctx->set_phase_timer(&timer);
  {
    ScopedPhase forward(*ctx, Phase::kForward);
    std::this_thread::sleep_for(20ms);
    ScopedPhase exchange(*ctx, Phase::kExchange);
    std::this_thread::sleep_for(10ms);
  }
  for (int i = 0; i < 2; ++i) {  // a phase repeats: its intervals add
    timer.begin(Phase::kOptimizer);
    std::this_thread::sleep_for(5ms);
    timer.end(Phase::kOptimizer);
  }
  timer.add_host_seconds(Phase::kData, 0.25);
  timer.add_host_seconds(Phase::kData, 0.5);
  StatusOr<PhaseSecondsArray> p = timer.collect();
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_GE(at(*p, Phase::kForward), 0.030);
  EXPECT_GE(at(*p, Phase::kExchange), 0.010);
  EXPECT_LE(at(*p, Phase::kExchange), at(*p, Phase::kForward));
  EXPECT_GE(at(*p, Phase::kOptimizer), 0.010);
  EXPECT_EQ(at(*p, Phase::kData), 0.75);
  EXPECT_EQ(at(*p, Phase::kBackward), 0);
  EXPECT_EQ(at(*p, Phase::kGradSync), 0);
  // Handed out once; the marks are reused.
  p = timer.collect();
  ASSERT_TRUE(p.ok());
  for (double s : *p) EXPECT_EQ(s, 0);
  for (int i = 0; i < 1000; ++i) {
    timer.begin(Phase::kBackward);
    timer.end(Phase::kBackward);
    ASSERT_TRUE(timer.collect().ok());
  }
  ctx->set_phase_timer(nullptr);
  ScopedPhase untimed(*ctx, Phase::kForward);  // no timer: nothing recorded, nothing checked
}

TEST(PhaseTimerTest, NamesEveryPhase) {
  EXPECT_STREQ(phase_name(Phase::kData), "data");
  EXPECT_STREQ(phase_name(Phase::kForward), "forward");
  EXPECT_STREQ(phase_name(Phase::kBackward), "backward");
  EXPECT_STREQ(phase_name(Phase::kExchange), "exchange");
  EXPECT_STREQ(phase_name(Phase::kGradSync), "grad_sync");
  EXPECT_STREQ(phase_name(Phase::kOptimizer), "optimizer");
}

TEST(PhaseTimerDeathTest, APhaseBegunTwiceOrEndedUnopenedAborts) {
  std::unique_ptr<Context> ctx = Context::host();
  EXPECT_DEATH(
      {
        PhaseTimer timer(ctx.get());
        timer.begin(Phase::kForward);
        timer.begin(Phase::kForward);
      },
      "phase forward begun twice");
  EXPECT_DEATH(
      {
        PhaseTimer timer(ctx.get());
        timer.end(Phase::kBackward);
      },
      "phase backward ended without a begin");
}

}  // namespace
}  // namespace moe
