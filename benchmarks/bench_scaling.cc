// momoe-bench scaling: one point of a weak- or strong-scaling curve per invocation (run it under
// mpirun -np R for R = 1, 2, 4, ...; benchmarks/run_scaling.sh does the sweep and the plot).
//   --what layer: the MoE layer forward + backward at EP = R (D, F, E, K below; capacity 1.25)
//   --what train: a training step of the quick-start model (16 experts) at EP = R
//   --mode weak:   the per-rank work is fixed (tokens per rank, or sequences per rank)
//   --mode strong: the global work is fixed and split over the ranks
// Reports the median time per iteration (each starts after a barrier and counts as the slowest
// rank) and the aggregate tokens/s (all ranks).
//
//   mpirun -np 4 momoe-bench scaling --what layer --mode weak [--tokens 2048] [--d 256] [--f 512]
//       [--experts 16] [--top-k 2] [--iterations 10] [--warmup 2]
#include <cstdio>
#include <filesystem>

#include "benchmarks/bench_util.h"
#include "benchmarks/layer_fixture.h"
#include "benchmarks/train_presets.h"
#include "comm/world.h"
#include "core/train/trainer.h"
#include "proto/run_convert.h"

namespace moe::bench {
namespace {

Status layer_point(const Args& a, comm::World* world, bool weak, JsonLine* j) {
  const int ranks = world->size();
  const int64_t base = a.get("tokens", 2048);
  const int64_t tokens = weak ? base : base / ranks;
  const MoeLayerConfig cfg = layer_config(a.get("d", 256), a.get("f", 512), a.get("experts", 16),
                                          a.get("top-k", 2), LayerVariant::kPlain);
  MOE_RETURN_IF_ERROR(cfg.validate("bench", ranks));
  LayerFixture fixture(cfg, tokens, world->comm.get(), world->rank());
  MOE_ASSIGN_OR_RETURN(
      Timing t, time_it(
                    static_cast<int>(a.get("warmup", 2)), static_cast<int>(a.get("iterations", 10)),
                    [&]() { return fixture.forward_backward(); }, world->comm.get()));
  j->str("what", "layer")
      .num("tokens_per_rank", tokens)
      .num("d", cfg.d_model)
      .num("f", cfg.d_expert)
      .num("experts", cfg.num_experts)
      .num("top_k", cfg.top_k)
      .num("iteration_ms", t.median * 1e3)
      .num("tokens_per_second", static_cast<double>(tokens) * ranks / t.median);
  return Status::OK();
}

// One training point in the job directory `dir` (every rank's).
Status train_point(const Args& a, comm::World* world, bool weak, const std::string& dir,
                   JsonLine* j) {
  const int ranks = world->size();
  const int64_t per_rank = a.get("sequences", 4);
  const int64_t batch = weak ? per_rank * ranks : per_rank * 4;  // strong: 4 ranks' worth, split
  if (batch % ranks != 0)
    return invalid_argument_error("global batch ", batch, " does not divide over ", ranks,
                                  " ranks");
  MOE_ASSIGN_OR_RETURN(
      RunConfig cfg,
      load_run_config(std::string(MOE_SOURCE_DIR) + "/configs/quickstart.pbtxt",
                      {"train.batch_size=" + std::to_string(batch), "train.probe_every=0",
                       // 16 experts so that EP divides up to 16
                       "model.moe.num_experts=16"},
                      ranks));
  TrainerOptions opts;
  opts.run_dir = dir;
  opts.resume = false;
  opts.progress = nullptr;
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::create(cfg, opts, world->comm.get()));
  // The phases of the timed steps (the slowest rank's per phase, as the coordinator merges them).
  const int warmup = static_cast<int>(a.get("warmup", 1));
  const int iterations = static_cast<int>(a.get("iterations", 3));
  PhaseSecondsArray phases{};
  int calls = 0;
  const auto step = [&]() -> Status {
    MOE_ASSIGN_OR_RETURN(StepStatsInfo s, t->step());
    if (calls++ >= warmup && s.phases.has_value()) {
      for (int p = 0; p < kNumPhases; ++p) phases[p] += (*s.phases)[p] / iterations;
    }
    return Status::OK();
  };
  MOE_ASSIGN_OR_RETURN(Timing timing, time_it(warmup, iterations, step, world->comm.get()));
  j->str("what", "train")
      .num("global_batch", batch)
      .num("ep", ranks)
      .num("step_ms", timing.median * 1e3)
      .num("tokens_per_second", static_cast<double>(batch * cfg.model.seq_len) / timing.median);
  // The model's sizes, for benchmarks/scaling_model.py.
  int64_t moe_layers = 0;
  const MoeLayerConfig* moe = nullptr;
  for (const BlockPlan& b : cfg.model.blocks) {
    if (b.moe) moe = &b.moe_cfg, ++moe_layers;
  }
  const ParameterSet& params = t->model().params();
  j->num("seq_len", cfg.model.seq_len)
      .num("d_model", cfg.model.d_model)
      .num("grad_accum", cfg.train.grad_accum)
      .num("moe_layers", moe_layers)
      .num("top_k", moe != nullptr ? moe->top_k : 0)
      .num("capacity_factor", moe == nullptr || moe->dropless ? 1.0 : moe->capacity_factor)
      .num("dense_params", static_cast<double>(params.numel(ParamKind::kDense)))
      .num("expert_params", static_cast<double>(params.numel(ParamKind::kExpert) * ranks));
  // Mean milliseconds per phase (base/phase_timer.h; the exchange lies inside forward and
  // backward) and the exchange's share of the step.
  for (int p = 0; p < kNumPhases; ++p) {
    j->num(std::string(phase_name(static_cast<Phase>(p))) + "_ms", phases[p] * 1e3);
  }
  j->num("exchange_share", phases[static_cast<int>(Phase::kExchange)] / timing.median);
  return Status::OK();
}

// One point of the curve: its JSON line (rank 0).
Status run_point(const Args& a, const std::string& what, const std::string& mode,
                 comm::World* world) {
  JsonLine j("scaling");
  j.str("mode", mode).num("world_size", world->size());
  if (what == "layer") {
    MOE_RETURN_IF_ERROR(layer_point(a, world, mode == "weak", &j));
  } else {
    // A private directory for the run, removed afterwards (by rank 0 alone after a failure,
    // when the other ranks may not reach a barrier).
    MOE_ASSIGN_OR_RETURN(const std::string dir, make_job_dir("scaling", world));
    const Status s = train_point(a, world, mode == "weak", dir, &j);
    if (!s.ok()) {
      std::error_code ec;
      if (world->rank() == 0) std::filesystem::remove_all(dir, ec);
      return s;
    }
    MOE_RETURN_IF_ERROR(remove_job_dir(dir, world));
  }
  if (world->rank() == 0) {
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return Status::OK();
}

}  // namespace

StatusOr<BenchRun> bench_scaling(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(Args a, Args::parse(argc, argv,
                                           {"what", "mode", "tokens", "sequences", "d", "f",
                                            "experts", "top-k", "iterations", "warmup"}));
  const std::string what = a.get_str("what", "layer"), mode = a.get_str("mode", "weak");
  MOE_RETURN_IF_ERROR(check_one_of("mode", mode, {"weak", "strong"}));
  MOE_RETURN_IF_ERROR(check_one_of("what", what, {"layer", "train"}));
  return BenchRun([a, what, mode, world] { return run_point(a, what, mode, world); });
}

}  // namespace moe::bench
