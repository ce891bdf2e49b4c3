// momoe-bench train: training throughput (tokens/s) on the CPU or a GPU (--device cuda), the
// model FLOP/s it makes (and on a GPU the MFU against the GPU's measured GEMM rate), and on the
// CPU the share of the step spent in GEMMs (every BLAS call is timed through
// kernels/cpu/blas_ref.h), for the quick-start config, an SMoE-medium-shaped config
// (spec/momentum-smoe.md 6.2: D = F = 352, 6 MoE layers of 16 experts, top-2, sequences of 512;
// vocabulary capped at 20000 for the bundled corpus) and, named alone, gpu-large (a model that
// fills one GPU: 12 MoE blocks of width 1024, sequences of 1024; the H100 issue's MFU shape).
//
//   momoe-bench train [--preset quickstart|smoe-medium|gpu-large|all] [--config FILE] [--steps 5]
//                     [--warmup 1]
//                     [--threads 0]   (parallel.threads: CPU threads per rank, 0 = its share)
//                     [--device cpu|cuda] [--precision FP32|BF16 (default: the config's)]
//                     [--cuda-graphs 0|1]
// --cuda-graphs 0|1 sets train.cuda_graphs (without it the config's, on by default: GPU runs of
// one rank in capacity mode replay); where graphs apply the warm-up lasts
// at least until the step is recorded, so every timed step is a replay ("graph_replays" counts
// them; -1: off).
// Each line names the attention path that ran ("attention": cpu, gemm, gemm-bf16 or fused: on a
// GPU bf16 runs take fused by default, the others by MOMOE_ATTENTION) and each phase's mean
// time ("forward_ms", ...; -1 where no timed step reported phases, as replayed steps do not).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "base/logging.h"
#include "base/phase_timer.h"
#include "base/stream_graph.h"
#include "benchmarks/bench_util.h"
#include "benchmarks/train_presets.h"
#include "comm/world.h"
#include "core/train/gemm_rate.h"
#include "core/train/model_size.h"
#include "core/train/trainer.h"
#include "kernels/attention.h"
#include "kernels/cpu/blas_ref.h"
#include "kernels/expert_gemm_path.h"
#include "proto/run_convert.h"

namespace moe::bench {

std::vector<TrainPreset> train_presets(const std::string& which) {
  std::vector<TrainPreset> all = {
      {"quickstart", {"train.probe_every=0"}},
      {"smoe-medium",
       {"model.d_model=352", "model.n_heads=8", "model.seq_len=512", "model.arch=sgsgsgsgsgsg",
        "model.moe.num_experts=16", "model.moe.d_expert=352", "train.batch_size=4",
        "data.vocab_max_size=20000", "train.probe_every=0"}}};
  // A model that fills one GPU (the H100 issue's MFU shape): 12 MoE blocks of width 1024, 16
  // heads of 64, sequences of 1024, 16 experts of width 2048, top 2; 16 sequences a step. Not in
  // "all": about 0.9 G parameters with the corpus's 20,000 words, a GPU's work.
  const TrainPreset gpu_large = {
      "gpu-large",
      {"model.d_model=1024", "model.n_heads=16", "model.seq_len=1024",
       "model.arch=sgsgsgsgsgsgsgsgsgsgsgsg", "model.moe.num_experts=16", "model.moe.top_k=2",
       "model.moe.d_expert=2048", "train.batch_size=16", "data.vocab_max_size=20000",
       "train.probe_every=0"}};
  if (which == "all") return all;
  all.push_back(gpu_large);
  for (const TrainPreset& p : all)
    if (p.name == which) return {p};
  return {};
}

StatusOr<std::string> make_job_dir(const std::string& preset, comm::World* world) {
  std::string dir;
  if (world->rank() == 0) {
    std::error_code ec;
    const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
    if (ec) return internal_error("momoe-bench train: no temporary directory: ", ec.message());
    std::string templ = (tmp / ("momoe_bench_train_" + preset + "_XXXXXX")).string();
    if (mkdtemp(templ.data()) == nullptr) {
      return internal_error("momoe-bench train: cannot create a directory like ", templ);
    }
    dir = templ;
  }
  if (world->size() == 1) return dir;
  return world->comm->broadcast_bytes(dir, 0);
}

Status remove_job_dir(const std::string& dir, comm::World* world) {
  if (world->size() > 1) MOE_RETURN_IF_ERROR(world->comm->barrier());
  if (world->rank() != 0) return Status::OK();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return internal_error("momoe-bench train: cannot remove ", dir, ": ", ec.message());
  return Status::OK();
}

namespace {

// The config of preset `p`: `config` with the preset's overrides and the flags' (`extra` last).
StatusOr<RunConfig> preset_config(const TrainPreset& p, const std::string& config, int threads,
                                  const std::string& device, const std::string& precision,
                                  const std::vector<std::string>& extra) {
  std::vector<std::string> overrides = p.overrides;
  overrides.push_back("parallel.threads=" + std::to_string(threads));
  overrides.push_back(device == "cuda" ? "train.device=CUDA" : "train.device=CPU");
  if (!precision.empty()) overrides.push_back("train.precision=" + precision);
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return load_run_config(config, overrides, 0);
}

// What a preset's timed steps measured (rank 0's view: tokens and time are the job's).
struct TrainMeasurement {
  int steps = 0;
  double seconds = 0;
  int64_t tokens = 0;
  kernels::ref::GemmCounters gemm;  // rank 0's BLAS calls (the CPU)
  double gemm_rate = -1;            // a GPU's measured GEMM FLOP/s; -1: none
  int64_t graph_replays = -1;       // timed steps replayed from a CUDA graph; -1: graphs off
  PhaseSecondsArray phases{};       // summed over the timed steps that report phases
  int phase_steps = 0;              // how many did (a replayed step has no phase marks)
};

// Mean milliseconds per phase of the steps that reported phases (base/phase_timer.h: on a GPU
// device time between events; the exchange lies inside forward and backward), -1 without any.
void add_phases(const TrainMeasurement& m, JsonLine* j) {
  for (int p = 0; p < kNumPhases; ++p) {
    j->num(std::string(phase_name(static_cast<Phase>(p))) + "_ms",
           m.phase_steps > 0 ? m.phases[p] / m.phase_steps * 1e3 : -1.0);
  }
}

// MFU's denominator on a GPU: the rate its GEMM reaches in the run's dtype (gemm_rate.h), or -1
// on the CPU and where it cannot be measured (a warning says why; the line has no MFU then).
double gpu_gemm_rate(Trainer& t) {
  if (!t.context().device().is_cuda()) return -1;
  StatusOr<double> rate = measure_gemm_rate(t.context(), t.model().params().act_dtype());
  if (rate.ok()) return *rate;
  log_warning(rate.status().to_string(), " (the line's mfu is -1)");
  return -1;
}

// The train line: throughput, model FLOP/s (model_size.h's convention, of the model as resolved:
// its vocabulary is the data's) and on a GPU the MFU against the ranks' GEMM rate (one GPU per
// rank, as the trainer's progress lines count it), the attention path, the CPU's GEMM share.
void print_train_line(const TrainPreset& p, const RunConfig& cfg, Trainer& t, int world_size,
                      const TrainMeasurement& m) {
  int64_t params = 0;
  for (const auto& prm : t.model().params().all()) params += prm->numel();
  const bool cpu = t.context().device().is_host();
  const double tokens = static_cast<double>(m.tokens);
  const double flops_per_token = model_size(t.model().config()).train_flops_per_token;
  const double model_flops = flops_per_token * tokens / m.seconds;
  const kernels::ref::GemmCounters& g = m.gemm;
  JsonLine j("train");
  j.str("preset", p.name)
      .str("device", t.context().device().to_string())
      .str("precision", precision_name(cfg.train.precision))
      .num("world_size", world_size)
      .num("threads_per_rank", t.context().threads())
      .num("params_on_rank0", static_cast<double>(params))
      .num("tokens_per_step", tokens / m.steps)
      .num("step_seconds", m.seconds / m.steps)
      .num("tokens_per_second", tokens / m.seconds)
      .num("train_flops_per_token", flops_per_token)
      .num("model_tflops_per_second", model_flops / 1e12)
      .num("gemm_tflops_per_second", m.gemm_rate > 0 ? m.gemm_rate / 1e12 : -1.0)
      .num("mfu", m.gemm_rate > 0 ? model_flops / (m.gemm_rate * world_size) : -1.0)
      // Which attention ran: cpu, gemm, gemm-bf16 or fused (kernels/attention.h), and how a GPU
      // runs dropless expert products (kernels/expert_gemm_path.h).
      .str("attention", kernels::attention_path(t.context(), t.model().params().act_dtype(),
                                                cfg.model.d_model / cfg.model.n_heads))
      .str("expert_gemm", cpu ? "cpu" : kernels::expert_gemm_path_name(kernels::expert_gemm_path()))
      // Rank 0's GEMM time over its step time (BLAS calls are timed on this rank only; a GPU's
      // GEMMs are not timed one by one: -1).
      .num("gemm_share", cpu ? g.seconds / m.seconds : -1.0)
      .num("gemm_gflops_per_second", cpu ? g.flops / std::max(g.seconds, 1e-9) / 1e9 : -1.0)
      .num("gemm_gflop_per_token", cpu ? g.flops / 1e9 / (tokens / world_size) : -1.0)
      .num("gemm_calls_per_step", cpu ? static_cast<double>(g.calls) / m.steps : -1.0)
      .num("graph_replays", static_cast<double>(m.graph_replays))
      .str("graph_capture", m.graph_replays < 0 ? "off" : stream_graph_capture_mode());
  add_phases(m, &j);
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

Status run_preset(const TrainPreset& p, const RunConfig& cfg, int steps, int warmup,
                  comm::World* world) {
  TrainerOptions opts;
  MOE_ASSIGN_OR_RETURN(opts.run_dir, make_job_dir(p.name, world));
  opts.resume = false;
  opts.progress = nullptr;
  MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::create(cfg, opts, world->comm.get()));
  // Graphs: warm up through the eager steps and the recording, so the timed steps replay.
  const int64_t graph_warmup = t->step_graph() ? StepGraph::kEagerSteps + 1 : 0;
  for (int64_t i = 0; i < std::max<int64_t>(warmup, graph_warmup); ++i) {
    MOE_RETURN_IF_ERROR(t->step().status());
  }
  const int64_t replays_before = t->step_graph() ? t->step_graph()->replays() : 0;
  kernels::ref::reset_gemm_counters();
  kernels::ref::set_gemm_timing(true);
  TrainMeasurement m;
  m.steps = steps;
  for (int i = 0; i < steps; ++i) {
    MOE_ASSIGN_OR_RETURN(StepStatsInfo s, t->step());
    m.seconds += s.step_seconds;
    m.tokens += s.tokens;
    if (s.phases.has_value()) {
      for (int p = 0; p < kNumPhases; ++p) m.phases[p] += (*s.phases)[p];
      ++m.phase_steps;
    }
  }
  kernels::ref::set_gemm_timing(false);
  m.gemm = kernels::ref::gemm_counters();
  if (t->step_graph()) m.graph_replays = t->step_graph()->replays() - replays_before;
  if (world->rank() == 0) {
    m.gemm_rate = gpu_gemm_rate(*t);
    print_train_line(p, cfg, *t, world->size(), m);
  }
  t.reset();
  return remove_job_dir(opts.run_dir, world);
}

}  // namespace

// Tokens per second of `steps` training steps (after one warm-up) of a preset on the CPU, for
// momoe-bench data's loader comparison.
StatusOr<double> train_tokens_per_second(const std::string& preset, int steps, comm::World* world) {
  const std::vector<TrainPreset> ps = train_presets(preset);
  if (ps.size() != 1) return invalid_argument_error("no preset ", preset);
  std::vector<std::string> overrides = ps[0].overrides;
  MOE_ASSIGN_OR_RETURN(
      RunConfig cfg,
      load_run_config(std::string(MOE_SOURCE_DIR) + "/configs/quickstart.pbtxt", overrides, 0));
  TrainerOptions opts;
  MOE_ASSIGN_OR_RETURN(opts.run_dir, make_job_dir(preset, world));
  opts.resume = false;
  opts.progress = nullptr;
  double seconds = 0;
  int64_t tokens = 0;
  {
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::create(cfg, opts, world->comm.get()));
    MOE_RETURN_IF_ERROR(t->step().status());
    for (int i = 0; i < steps; ++i) {
      MOE_ASSIGN_OR_RETURN(StepStatsInfo s, t->step());
      seconds += s.step_seconds;
      tokens += s.tokens;
    }
  }
  MOE_RETURN_IF_ERROR(remove_job_dir(opts.run_dir, world));
  return static_cast<double>(tokens) / seconds;
}

StatusOr<BenchRun> bench_train(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(Args a, Args::parse(argc, argv,
                                           {"preset", "config", "steps", "warmup", "threads",
                                            "device", "precision", "cuda-graphs"}));
  const std::string device = a.get_str("device", "cpu");
  MOE_RETURN_IF_ERROR(check_one_of("device", device, {"cpu", "cuda"}));
  const std::string preset = a.get_str("preset", "all");
  MOE_RETURN_IF_ERROR(
      check_one_of("preset", preset, {"quickstart", "smoe-medium", "gpu-large", "all"}));
  const std::vector<TrainPreset> ps = train_presets(preset);
  const std::string config =
      a.get_str("config", std::string(MOE_SOURCE_DIR) + "/configs/quickstart.pbtxt");
  std::vector<std::string> extra;
  // --cuda-graphs 0 or 1 sets train.cuda_graphs; without it the config's (on by default).
  const int64_t graphs = a.get("cuda-graphs", -1);
  if (graphs >= 0)
    extra.push_back(graphs != 0 ? "train.cuda_graphs=true" : "train.cuda_graphs=false");
  // Every preset's config, loaded now: a bad --config or --precision is refused before anything
  // runs.
  std::vector<RunConfig> cfgs;
  for (const TrainPreset& p : ps) {
    MOE_ASSIGN_OR_RETURN(RunConfig cfg,
                         preset_config(p, config, static_cast<int>(a.get("threads", 0)), device,
                                       a.get_str("precision", ""), extra));
    cfgs.push_back(std::move(cfg));
  }
  const int steps = static_cast<int>(a.get("steps", 5)),
            warmup = static_cast<int>(a.get("warmup", 1));
  return BenchRun([ps, cfgs, steps, warmup, world]() -> Status {
    for (size_t i = 0; i < ps.size(); ++i) {
      MOE_RETURN_IF_ERROR(run_preset(ps[i], cfgs[i], steps, warmup, world));
    }
    return Status::OK();
  });
}

}  // namespace moe::bench
