#include "base/stream_graph.h"

#if defined(MOE_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

#include <cstdlib>
#include <cstring>
#include <string>

#include "base/check.h"

namespace moe {

#if defined(MOE_WITH_CUDA)
namespace {

// The recording on this thread, for note_captured.
struct CaptureWatch {
  cudaStream_t stream = nullptr;  // null: no recording
  const char* last_intact = "the start of the recording";
  std::string broken;  // the first noted operation that found the capture broken
};

CaptureWatch& capture_watch() {
  thread_local CaptureWatch w;
  return w;
}

// Ends a capture that `record` or the CUDA runtime broke off, so the stream can run work again.
void abandon_capture(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(stream, &partial);
  if (partial != nullptr) cudaGraphDestroy(partial);
  cudaGetLastError();  // capture errors are not sticky; clear the last one for later checks
}

}  // namespace

StatusOr<std::unique_ptr<StreamGraph>> StreamGraph::capture(Context& ctx,
                                                            const std::function<Status()>& record) {
  if (!ctx.device().is_cuda()) {
    return unimplemented_error("CUDA graphs on ", ctx.device().to_string(), " (a GPU only)");
  }
  if (ctx.capturing()) return failed_precondition_error("a CUDA graph capture inside another");
  CudaDeviceGuard on_device(ctx.device());
  const auto stream = static_cast<cudaStream_t>(ctx.stream().handle);
  // Every allocation made while recording must be freed while recording: the graph owns it, and
  // a replay frees and remakes it (one that outlived the recording would change under its
  // holder); a tensor made before and freed inside would be freed again by every replay.
  const size_t in_use = ctx.allocator().stats().bytes_in_use;
  // Thread-local mode: this thread's calls that are illegal during a capture (a synchronize, a
  // cudaMalloc) fail instead of silently leaving the graph; other threads are unaffected.
  const cudaStreamCaptureMode mode = std::strcmp(stream_graph_capture_mode(), "relaxed") == 0
                                         ? cudaStreamCaptureModeRelaxed
                                         : cudaStreamCaptureModeThreadLocal;
  MOE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, mode));
  ctx.capturing_ = true;
  capture_watch() = CaptureWatch();
  capture_watch().stream = stream;
  Status recorded = record();
  const std::string broken = capture_watch().broken.empty()
                                 ? std::string()
                                 : str_cat(" (first found broken by ", capture_watch().broken, ")");
  capture_watch() = CaptureWatch();
  ctx.capturing_ = false;
  if (!recorded.ok()) {
    // Once a capture breaks, the next launch or allocation on its stream fails too: `broken`
    // names where it broke.
    abandon_capture(stream);
    return recorded.with_context(str_cat("while capturing a CUDA graph", broken));
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  // Read after the capture ends: a memory pool's attributes cannot be read while this thread
  // records (the call would break the recording; the allocator's stats() skips them then).
  const size_t after = ctx.allocator().stats().bytes_in_use;
  const std::string unbalanced =
      after == in_use
          ? std::string()
          : str_cat("; the recorded work changed the memory in use from ", in_use, " to ", after,
                    " bytes (a tensor made while recording outlives it, or one made "
                    "before was freed in it)");
  if (ended != cudaSuccess) {
    abandon_capture(stream);
    return failed_precondition_error(
        "the CUDA graph capture failed: ", cudaGetErrorName(ended), " (", cudaGetErrorString(ended),
        "): the captured work used a call a recording refuses (a wait, a query of a memory "
        "pool, an allocation outside the stream, work on another stream)",
        broken, unbalanced);
  }
  if (!unbalanced.empty()) {
    cudaGraphDestroy(graph);
    return failed_precondition_error("not a replayable CUDA graph", unbalanced);
  }
  std::unique_ptr<StreamGraph> g(new StreamGraph());
  g->graph_ = graph;
  g->stream_ = ctx.stream();
  g->device_ = ctx.device().index;
  size_t nodes = 0;
  MOE_CUDA_RETURN_IF_ERROR(cudaGraphGetNodes(graph, nullptr, &nodes));
  g->nodes_ = static_cast<int64_t>(nodes);
  cudaGraphExec_t exec = nullptr;
  MOE_CUDA_RETURN_IF_ERROR(
      cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  g->exec_ = exec;
  return g;
}

StreamGraph::~StreamGraph() {
  CudaDeviceGuard on_device(Device::cuda(device_));
  // The last replay ends before its graph goes; then the graph's own pool, which keeps its memory
  // reserved for later graphs, gives it back.
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_.handle));
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  cudaDeviceGraphMemTrim(device_);
  cudaGetLastError();
}

Status StreamGraph::replay(Context& ctx) {
  if (ctx.stream().handle != stream_.handle) {
    return invalid_argument_error("a CUDA graph replayed on another context's stream");
  }
  CudaDeviceGuard on_device(ctx.device());
  MOE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_),
                                           static_cast<cudaStream_t>(stream_.handle)));
  return Status::OK();
}

bool recording_on_this_thread() { return capture_watch().stream != nullptr; }

const char* stream_graph_capture_mode() {
  const char* mode = std::getenv("MOMOE_CUDA_GRAPH_CAPTURE");
  return mode != nullptr && std::strcmp(mode, "relaxed") == 0 ? "relaxed" : "thread-local";
}

void note_captured(const char* op) {
  CaptureWatch& w = capture_watch();
  if (w.stream == nullptr || !w.broken.empty()) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(w.stream, &status) != cudaSuccess) {
    cudaGetLastError();  // no answer: nothing learnt
    return;
  }
  if (status == cudaStreamCaptureStatusActive) {
    w.last_intact = op;
  } else {
    w.broken = str_cat(op, "; last found intact by ", w.last_intact);
  }
}

#else  // !MOE_WITH_CUDA

bool recording_on_this_thread() { return false; }
const char* stream_graph_capture_mode() { return "thread-local"; }
void note_captured(const char*) {}

StatusOr<std::unique_ptr<StreamGraph>> StreamGraph::capture(Context& ctx,
                                                            const std::function<Status()>&) {
  return unimplemented_error("CUDA graphs on ", ctx.device().to_string(),
                             ": this build has no CUDA support");
}
StreamGraph::~StreamGraph() = default;
Status StreamGraph::replay(Context&) { return unimplemented_error("CUDA graphs: no CUDA"); }

#endif

}  // namespace moe
