// momoe-bench memory: each training setting's memory and step time against the baseline, for
// issue 34's targets (activation recomputation, the distributed optimizer). Run alone for the
// recompute settings, under `mpirun -np R` for the distributed optimizer at DP R as well:
//
//   momoe-bench memory [--preset smoe-medium|quickstart] [--steps 3] [--warmup 1] [--threads 0]
//                      [--settings none,selective,full[,zero1]] [--precision FP32|BF16]
//                      [--loss-chunk 0]
//
// --precision sets train.precision for every setting (the presets' default: FP32); under BF16
// zero1 shards the fp32 masters too, which persistent_bytes and estimate_parameter_bytes show.
// --loss-chunk N sets train.loss_chunk_tokens for every setting (the loss in chunks of N tokens).
// Per setting (one JSON line each, rank 0's figures; the ranks are symmetric under DP):
//   persistent_bytes   tensors held between steps (parameters, gradients, optimizer state)
//   peak_tensor_bytes  the step's allocator peak (the largest over the timed steps)
//   activation_bytes   peak - persistent: what one step adds (activations and scratch)
//   peak_rss_bytes     the process's resident peak in the step (-1 where the kernel cannot say)
//   estimate_*         the start-up estimate (core/train/memory_estimate.h) for the same setting:
//                      in all, the activations, the optimizer state, the parameters (masters,
//                      working copies)
//   activation_saved   1 - activation_bytes / the baseline's; step_time_overhead: step_ms over
//                      the baseline's - 1; optimizer_saved: the persistent bytes saved over the
//                      baseline's estimated optimizer state (under BF16 zero1 saves 3/4 of the
//                      fp32 masters at DP 4 as well, so it may pass 1)
#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include "benchmarks/bench_util.h"
#include "benchmarks/train_presets.h"
#include "comm/world.h"
#include "core/train/trainer.h"
#include "proto/run_convert.h"

namespace moe::bench {
namespace {

struct Setting {
  std::string name;
  std::vector<std::string> overrides;
};

StatusOr<Setting> setting_named(const std::string& name, int world_size) {
  if (name == "none") return Setting{name, {}};  // the preset as it is
  if (name == "selective") return Setting{name, {"train.recompute=SELECTIVE"}};
  if (name == "full") return Setting{name, {"train.recompute=FULL"}};
  if (name == "zero1") {
    if (world_size < 2) {
      return invalid_argument_error(
          "--settings zero1 needs data-parallel ranks: run under mpirun -np 2 or more");
    }
    return Setting{name, {"train.distributed_optimizer=true"}};
  }
  return invalid_argument_error("--settings: ", name,
                                " is not one of none, selective, full, zero1");
}

struct Measured {
  int64_t persistent = 0, peak = 0, rss = -1;
  double step_ms = 0;
  int64_t loss_chunk_tokens = 0;
  MemoryEstimate estimate;
  int64_t activation() const { return peak - persistent; }
};

// The config of preset `p` under setting `s`.
StatusOr<RunConfig> setting_config(const TrainPreset& p, const Setting& s, int threads) {
  std::vector<std::string> overrides = p.overrides;
  overrides.insert(overrides.end(), s.overrides.begin(), s.overrides.end());
  overrides.push_back("parallel.threads=" + std::to_string(threads));
  return load_run_config(std::string(MOE_SOURCE_DIR) + "/configs/quickstart.pbtxt", overrides, 0);
}

StatusOr<Measured> measure(const TrainPreset& p, const RunConfig& cfg, int steps, int warmup,
                           comm::World* world) {
  TrainerOptions opts;
  Measured m;
  m.loss_chunk_tokens = cfg.train.loss_chunk_tokens;
  MOE_ASSIGN_OR_RETURN(opts.run_dir, make_job_dir(p.name + "_memory", world));
  opts.resume = false;
  opts.progress = nullptr;
  {
    MOE_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t, Trainer::create(cfg, opts, world->comm.get()));
    for (int i = 0; i < warmup; ++i) MOE_RETURN_IF_ERROR(t->step().status());
    t->context().allocator().release_cached();
    m.persistent = static_cast<int64_t>(t->context().allocator().stats().bytes_in_use);
    std::vector<double> ms;
    for (int i = 0; i < steps; ++i) {
      MOE_ASSIGN_OR_RETURN(StepStatsInfo st, t->step());
      m.peak = std::max(m.peak, st.peak_tensor_bytes.value_or(0));
      m.rss = std::max(m.rss, st.peak_rss_bytes.value_or(-1));
      ms.push_back(st.step_seconds * 1e3);
    }
    std::sort(ms.begin(), ms.end());
    m.step_ms = ms[ms.size() / 2];
    m.estimate = t->memory_estimate();
  }
  MOE_RETURN_IF_ERROR(remove_job_dir(opts.run_dir, world));
  return m;
}

void print_line(const TrainPreset& p, const Setting& s, const Measured& m, const Measured& base,
                int world_size) {
  JsonLine j("memory");
  j.str("preset", p.name)
      .str("setting", s.name)
      .num("loss_chunk_tokens", static_cast<double>(m.loss_chunk_tokens))
      .num("world_size", world_size)
      .num("persistent_bytes", static_cast<double>(m.persistent))
      .num("peak_tensor_bytes", static_cast<double>(m.peak))
      .num("activation_bytes", static_cast<double>(m.activation()))
      .num("peak_rss_bytes", static_cast<double>(m.rss))
      .num("step_ms", m.step_ms)
      .num("estimate_bytes", static_cast<double>(m.estimate.total()))
      .num("estimate_activation_bytes", static_cast<double>(m.estimate.activation_bytes))
      .num("estimate_optimizer_bytes", static_cast<double>(m.estimate.optimizer_bytes))
      .num("estimate_parameter_bytes", static_cast<double>(m.estimate.parameter_bytes))
      .num("estimate_over_peak",
           static_cast<double>(m.estimate.total()) / static_cast<double>(m.peak))
      .num("activation_saved",
           1.0 - static_cast<double>(m.activation()) / static_cast<double>(base.activation()))
      .num("step_time_overhead", m.step_ms / base.step_ms - 1.0)
      .num("optimizer_saved", static_cast<double>(base.persistent - m.persistent) /
                                  static_cast<double>(base.estimate.optimizer_bytes));
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// Measures each setting in turn (with its config), the first as the baseline.
Status measure_settings(const TrainPreset& p, const std::vector<Setting>& settings,
                        const std::vector<RunConfig>& cfgs, int steps, int warmup,
                        comm::World* world) {
  Measured base;
  for (size_t i = 0; i < settings.size(); ++i) {
    MOE_ASSIGN_OR_RETURN(Measured m, measure(p, cfgs[i], steps, warmup, world));
    if (i == 0) base = m;  // the first setting is the baseline
    if (world->rank() == 0) print_line(p, settings[i], m, base, world->size());
  }
  return Status::OK();
}

}  // namespace

StatusOr<BenchRun> bench_memory(int argc, char** argv, comm::World* world) {
  MOE_ASSIGN_OR_RETURN(Args a, Args::parse(argc, argv,
                                           {"preset", "steps", "warmup", "threads", "settings",
                                            "precision", "loss-chunk"}));
  const std::string preset = a.get_str("preset", "smoe-medium");
  MOE_RETURN_IF_ERROR(check_one_of("preset", preset, {"quickstart", "smoe-medium"}));
  std::vector<TrainPreset> ps = train_presets(preset);
  const int64_t loss_chunk = a.get("loss-chunk", 0);
  ps[0].overrides.push_back("train.loss_chunk_tokens=" + std::to_string(loss_chunk));
  const std::string fallback =
      world->size() > 1 ? "none,selective,full,zero1" : "none,selective,full";
  const int threads = static_cast<int>(a.get("threads", 0));
  // Every setting's config, loaded now: a bad --precision is refused before anything runs.
  std::vector<Setting> settings;
  std::vector<RunConfig> cfgs;
  std::stringstream list(a.get_str("settings", fallback));
  for (std::string name; std::getline(list, name, ',');) {
    MOE_ASSIGN_OR_RETURN(Setting s, setting_named(name, world->size()));
    s.overrides.push_back("train.precision=" + a.get_str("precision", "FP32"));
    MOE_ASSIGN_OR_RETURN(RunConfig cfg, setting_config(ps[0], s, threads));
    settings.push_back(s);
    cfgs.push_back(std::move(cfg));
  }
  if (settings.empty()) return invalid_argument_error("--settings names no setting");
  const int steps = static_cast<int>(std::max<int64_t>(1, a.get("steps", 3)));
  const int warmup = static_cast<int>(a.get("warmup", 1));
  return BenchRun([p = ps[0], settings, cfgs, steps, warmup, world] {
    return measure_settings(p, settings, cfgs, steps, warmup, world);
  });
}

}  // namespace moe::bench
