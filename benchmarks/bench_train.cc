// momoe-bench train: CPU training throughput (tokens/s) and the share of the step spent in GEMMs
// (every BLAS call is timed through kernels/reference/blas_ref.h), for the quick-start config and
// an SMoE-medium-shaped config (spec/momentum-smoe.md 6.2: D = F = 352, 6 MoE layers of 16
// experts, top-2, sequences of 512; vocabulary capped at 20000 for the bundled corpus).
//
//   momoe-bench train [--preset quickstart|smoe-medium|all] [--config FILE] [--steps 5] [--warmup 1]
#include <cstdio>
#include <filesystem>

#include "benchmarks/bench_util.h"
#include "core/train/trainer.h"
#include "kernels/reference/blas_ref.h"
#include "comm/world.h"
#include "proto/run_convert.h"

namespace moe::bench {
namespace {

struct Preset {
  std::string name;
  std::vector<std::string> overrides;
};

std::vector<Preset> presets(const std::string& which) {
  std::vector<Preset> all = {
      {"quickstart", {"train.probe_every=0"}},
      {"smoe-medium",
       {"model.d_model=352", "model.n_heads=8", "model.seq_len=512", "model.arch=sgsgsgsgsgsg",
        "model.moe.num_experts=16", "model.moe.d_expert=352", "train.batch_size=4",
        "data.vocab_max_size=20000", "train.probe_every=0"}}};
  if (which == "all") return all;
  for (const Preset& p : all)
    if (p.name == which) return {p};
  return {};
}

Status run_preset(const Preset& p, const std::string& config, int steps, int warmup, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(RunConfig cfg, load_run_config(config, p.overrides, 0));
  TrainerOptions opts;
  opts.run_dir = (std::filesystem::temp_directory_path() / ("momoe_bench_train_" + p.name)).string();
  opts.resume = false;
  opts.progress = nullptr;
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::create(cfg, opts, world->comm.get()));
  for (int i = 0; i < warmup; ++i) MOE_RETURN_IF_ERROR(t->step().status());
  kernels::ref::reset_gemm_counters();
  kernels::ref::set_gemm_timing(true);
  double seconds = 0;
  int64_t tokens = 0;
  for (int i = 0; i < steps; ++i) {
    MOE_ASSIGN_OR_RETURN(StepStatsInfo s, t->step());
    seconds += s.step_seconds;
    tokens += s.tokens;
  }
  kernels::ref::set_gemm_timing(false);
  const kernels::ref::GemmCounters g = kernels::ref::gemm_counters();
  if (world->rank() == 0) {
    int64_t params = 0;
    for (const auto& prm : t->model().params().all()) params += prm->numel();
    JsonLine j("train");
    j.str("preset", p.name)
        .num("world_size", world->size())
        .num("params_on_rank0", static_cast<double>(params))
        .num("tokens_per_step", static_cast<double>(tokens) / steps)
        .num("step_seconds", seconds / steps)
        .num("tokens_per_second", static_cast<double>(tokens) / seconds)
        // Rank 0's GEMM time over its step time (BLAS calls are timed on this rank only).
        .num("gemm_share", g.seconds / seconds)
        .num("gemm_gflops_per_second", g.flops / std::max(g.seconds, 1e-9) / 1e9)
        .num("gemm_gflop_per_token", g.flops / 1e9 / (static_cast<double>(tokens) / world->size()))
        .num("gemm_calls_per_step", static_cast<double>(g.calls) / steps);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  std::filesystem::remove_all(opts.run_dir);
  return Status::OK();
}

}  // namespace

Status bench_train(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(Args a, Args::parse(argc, argv, {"preset", "config", "steps", "warmup"}));
  const std::vector<Preset> ps = presets(a.get_str("preset", "all"));
  if (ps.empty()) return invalid_argument_error("--preset must be quickstart, smoe-medium or all");
  const std::string config = a.get_str("config", std::string(MOE_SOURCE_DIR) + "/configs/quickstart.pbtxt");
  for (const Preset& p : ps) {
    MOE_RETURN_IF_ERROR(run_preset(p, config, static_cast<int>(a.get("steps", 5)),
                                   static_cast<int>(a.get("warmup", 1)), world));
  }
  return Status::OK();
}

}  // namespace moe::bench
