#include "core/train/step_graph.h"

#include "base/logging.h"

namespace moe {

std::string step_graph_refusal(const RunConfig& cfg, Device device, int world_size,
                               bool host_collectives) {
  if (!device.is_cuda()) return "CUDA graphs need a GPU (train.device: CUDA)";
  if (world_size > 1) {
    return str_cat(world_size, " ranks: graphs are recorded for one rank only for now");
  }
  if (host_collectives) {
    return "the job's communicator exchanges through host memory (MPI or Local backend; run one "
           "rank without mpirun)";
  }
  for (size_t b = 0; b < cfg.model.blocks.size(); ++b) {
    const BlockPlan& plan = cfg.model.blocks[b];
    if (plan.moe && plan.moe_cfg.dropless) {
      return str_cat("block ", b, ": a dropless MoE layer reads its loads on the host");
    }
  }
  return "";
}

bool StepGraph::runs_eagerly(const std::vector<double>& key) const {
  return calls_ < kEagerSteps || !failure_.empty() || (graph_ != nullptr && key != key_);
}

Status StepGraph::run(Context& ctx, const std::vector<double>& key,
                      const std::function<Status()>& work) {
  const bool eager = runs_eagerly(key);
  ++calls_;
  replayed_last_ = false;
  if (eager) {
    ++eager_;
    return work();
  }
  if (!graph_) return record(ctx, key, work);
  ++replays_;
  replayed_last_ = true;
  return graph_->replay(ctx);
}

Status StepGraph::record(Context& ctx, const std::vector<double>& key,
                         const std::function<Status()>& work) {
  // The eager steps' activations stay cached in the context's pool; the graph gets its own.
  ctx.allocator().release_cached();
  StatusOr<std::unique_ptr<StreamGraph>> g = StreamGraph::capture(ctx, work);
  recorded_peak_bytes_ = ctx.allocator().stats().peak_bytes_in_use;
  if (!g.ok()) {
    failure_ = g.status().to_string();
    log_warning("train.cuda_graphs: the step could not be recorded as a CUDA graph (", failure_,
                "); every step runs eagerly from here");
    ++eager_;
    return work();
  }
  graph_ = std::move(*g);
  key_ = key;
  log_info("train.cuda_graphs: step recorded as a CUDA graph of ", graph_->nodes(),
           " nodes; steps with the same loss scales replay it");
  ++replays_;
  replayed_last_ = true;
  return graph_->replay(ctx);
}

}  // namespace moe
