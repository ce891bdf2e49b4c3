// CUDA graphs of the training step (train.cuda_graphs). A step's device work between its batch
// and its one sync point (every micro-batch's forward and backward, the gradient reduction and
// the step buffer's sums: Trainer::device_work) launches thousands of small kernels; recorded
// once as a graph (base/stream_graph.h), later steps replay it as one launch, with the same
// kernels, arguments and memory, so they compute the same bits as eager steps.
//
// That holds only while nothing the recorded launches read from the host changes. What varies
// from step to step:
//   - the batch: copied from staging memory (Context::staging) that the graph reads when it runs;
//   - the step and its first sequence, which key every random draw (dropout masks, SparseMixer's
//     samples): copied from staging into device memory at the start of the work, where the
//     kernels read them (StepContext::device_step, base/rng.h DeviceStep);
//   - each micro-batch's loss scale, 1 / (its counted targets): the step's key. A step whose key
//     differs from the recorded one runs eagerly (a corpus whose targets are all counted never
//     does);
// and what is read on the host inside the step: a dropless layer's counts (refused), collectives
// through host memory (the MPI and Local backends, refused; NCCL's could be recorded, but more
// than one rank is refused for now). The stop and save flags and the optimizer stay outside,
// after the work.
//
// The first kEagerSteps steps run eagerly (lazily made buffers, cuBLAS's first choices), the next
// is recorded and replayed, and every later step with the same key replays. A recording that
// fails (a wait inside the step) is reported once and the run continues eagerly. Phases are not
// timed inside a replayed step (its forward, backward and reduction are one launch).
//
// Memory: the graph's allocations come from its own pool, beside the context's, so the memory
// the eager steps left cached in the context's pool is released before recording (one device
// wait, once per run); a replayed step's peak is the recording's (recorded_peak_bytes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/context.h"
#include "base/stream_graph.h"
#include "types/run_config.h"

namespace moe {

// Why the training steps of `cfg` on a context of `device` with `world_size` ranks cannot be
// replayed as a CUDA graph ("" when they can): not a GPU, several ranks, a communicator that
// exchanges through host memory (`host_collectives`: MPI or Local, even at one rank), or a
// dropless MoE layer (the reason names the block).
std::string step_graph_refusal(const RunConfig& cfg, Device device, int world_size,
                               bool host_collectives);

class StepGraph {
 public:
  static constexpr int64_t kEagerSteps = 2;

  // Runs `work` (which enqueues the step's device work on ctx and never waits): eagerly for the
  // first kEagerSteps calls, when `key` differs from the recorded step's key, and after a
  // recording failed; otherwise it records `work` once (the call that records also replays) and
  // replays the recording.
  Status run(Context& ctx, const std::vector<double>& key, const std::function<Status()>& work);
  // Whether the next run() with `key` runs `work` eagerly (rather than recording or replaying).
  bool runs_eagerly(const std::vector<double>& key) const;

  int64_t replays() const { return replays_; }
  int64_t eager_steps() const { return eager_; }
  // The recording's node count (0 before it is made).
  int64_t nodes() const { return graph_ ? graph_->nodes() : 0; }
  // Why recording failed ("" when it did not, or has not been tried).
  const std::string& failure() const { return failure_; }
  // The context allocator's peak bytes in use during the recording: a replay allocates the same
  // memory (the graph's own), but through no allocate() call the allocator could count.
  size_t recorded_peak_bytes() const { return recorded_peak_bytes_; }
  // Whether the last run() replayed the recording (rather than running eagerly).
  bool replayed_last() const { return replayed_last_; }

 private:
  Status record(Context& ctx, const std::vector<double>& key, const std::function<Status()>& work);

  int64_t calls_ = 0, replays_ = 0, eager_ = 0;
  std::vector<double> key_;
  std::unique_ptr<StreamGraph> graph_;
  std::string failure_;
  size_t recorded_peak_bytes_ = 0;
  bool replayed_last_ = false;
};

}  // namespace moe
