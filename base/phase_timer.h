// Where a training step's time goes: data, forward, backward, the MoE exchange (inside forward
// and backward), the gradient synchronisation and the optimizer. The trainer owns one PhaseTimer
// per rank and hands it to its Context, so that deep code (the MoE dispatcher's all-to-all) can
// mark its phase with a ScopedPhase without knowing about the trainer.
//
// Measured where the work runs, without waiting: on the CPU (synchronous kernels) a phase is the
// host time between its begin and end; on a GPU it is the device time between two CUDA events
// recorded on the context's stream, read once the stream has passed them. collect() never waits:
// a phase whose end event has not completed yet (the optimizer, enqueued after the step's one
// sync point) is reported by a later collect(). Host phases (the data, read on the host) are
// host time on every device. On CUDA builds every phase is also an NVTX range ("momoe:forward",
// ...), so Nsight Systems shows them on the timeline.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "base/status.h"

namespace moe {

class Context;

enum class Phase : int { kData = 0, kForward, kBackward, kExchange, kGradSync, kOptimizer };
inline constexpr int kNumPhases = 6;
const char* phase_name(Phase p);  // "data", "forward", ...

using PhaseSecondsArray = std::array<double, kNumPhases>;

class PhaseTimer {
 public:
  // Marks are recorded on `ctx` (borrowed; must outlive the timer).
  explicit PhaseTimer(Context* ctx);
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

  // A phase on the context's stream; phases may nest (the exchange inside forward) but a phase
  // does not nest in itself. Errors (a CUDA event that cannot be recorded) are kept and returned
  // by collect(): timing never changes what a step computes.
  void begin(Phase p);
  void end(Phase p);
  // A phase timed on the host (work the host does itself, e.g. reading the batch).
  void add_host_seconds(Phase p, double seconds);

  // Seconds per phase of every phase completed since the last collect(); never waits.
  StatusOr<PhaseSecondsArray> collect();

 private:
  struct Mark;  // a host time or a CUDA event
  struct Interval {
    Phase phase;
    int begin_mark, end_mark;
  };
  int record();          // a new mark on the stream; its index
  void release_marks();  // marks no pending interval needs go back to the pool

  Context* ctx_;
  std::vector<Mark*> marks_;          // index -> mark (owned; reused)
  std::vector<int> free_;             // unused mark indices
  std::array<int, kNumPhases> open_;  // the begin mark of each open phase, -1 when closed
  std::vector<Interval> pending_;
  PhaseSecondsArray host_{};
  Status error_;
};

// Times a phase on `ctx`'s PhaseTimer (nothing when the context has none).
class ScopedPhase {
 public:
  ScopedPhase(Context& ctx, Phase p);
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseTimer* timer_;
  Phase phase_;
};

}  // namespace moe
