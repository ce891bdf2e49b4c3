// A CUDA graph of a Context's stream: the work one call enqueues, recorded once (stream capture)
// and replayed as a single launch. Replaying launches the same kernels with the same arguments
// on the same memory, so it computes what the recorded calls would have computed eagerly, bit
// for bit, provided those calls enqueue nothing that depends on host values that change between
// replays (the caller's contract: the trainer keys its graph on such values, core/train/
// step_graph.h). Copies from host memory must come from Context::staging (page-locked); the
// graph reads that memory when it runs.
//
// Memory the recorded work allocates through the context (stream-ordered) belongs to the graph
// and is freed again on each replay (cudaGraphInstantiateFlagAutoFreeOnLaunch), so tensors made
// during the capture must not be used after it. The host context has no graphs: capture()
// returns kUnimplemented there.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "base/context.h"
#include "base/status.h"

namespace moe {

class StreamGraph {
 public:
  // Records what `record` enqueues on ctx's stream (nothing runs) and instantiates it. While
  // recording, ctx.capturing() is true: a wait for the device fails, as does any CUDA call that
  // would need one. An error from `record` or from the capture ends it and is returned; the
  // stream is usable again afterwards.
  static StatusOr<std::unique_ptr<StreamGraph>> capture(Context& ctx,
                                                        const std::function<Status()>& record);
  // Waits for the graph's last replay and returns its memory (a wait: destroy graphs between
  // runs, not between steps).
  ~StreamGraph();
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  // Enqueues the whole graph on ctx's stream (the context it was captured on); does not wait.
  Status replay(Context& ctx);
  // The recorded graph's node count (kernels, copies, memsets, allocations).
  int64_t nodes() const { return nodes_; }

 private:
  StreamGraph() = default;
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  Stream stream_;
  int device_ = 0;
  int64_t nodes_ = 0;
};

// While StreamGraph::capture records on this thread: `op` was just enqueued. A call the CUDA
// runtime refuses during a capture ends it, and where that call's error is not reported (inside
// a library, or a cleanup that cannot report) the capture fails only at its end; the first
// noted operation that finds the capture broken is named in capture()'s error, beside the last
// that found it intact, so the culprit lies between the two. Without a recording on this
// thread: one thread-local read.
void note_captured(const char* op);

// Whether StreamGraph::capture is recording on this thread: calls a recording cannot hold (a
// memory pool's attributes, a wait) must be skipped then.
bool recording_on_this_thread();

// How captures record: "thread-local" (this thread's calls a recording cannot hold fail), or
// "relaxed" under MOMOE_CUDA_GRAPH_CAPTURE=relaxed, a diagnosis, not for training (such calls
// run once, outside the graph, so a recording that then succeeds names the kind of culprit).
const char* stream_graph_capture_mode();

}  // namespace moe
