// momoe-train: trains a MoE language model from a run configuration.
//
//   momoe-train --config configs/quickstart.pbtxt [--set train.steps=100 ...] [--run-dir DIR]
//   mpirun -np 4 momoe-train --config ... --ep 2
//
// Thin by design: parse flags, load and validate the config, create the world communicator,
// build the Trainer, run it, and turn a Status into an exit code (aborting the communicator on a
// fatal error so that no peer waits forever).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/base/logging.h"
#include "core/train/trainer.h"
#include "launcher/env_params.h"
#include "launcher/exit_status.h"
#include "launcher/flags.h"
#include "comm/world.h"
#include "proto/run_convert.h"

namespace moe {
namespace {

int fail(const Status& s, comm::World* world) {
  return exit_with(s, world != nullptr ? world->comm.get() : nullptr);
}

int run(int argc, char** argv) {
  FlagParser flags;
  flags.value("config", "run configuration (protobuf text format, momoe.RunConfig)");
  flags.value("set", "override one config field, e.g. --set train.steps=100", true);
  flags.value("run-dir", "run directory (statistics, checkpoints, cache); default runs/<config name>");
  flags.value("ep", "expert-parallel group size (default: parallel.ep of the config)");
  flags.switch_flag("fresh", "do not resume from a checkpoint in the run directory");
  flags.value("log-level", "debug | info | warning | error (default info)");
  flags.switch_flag("help", "print this help");
  Status parsed = flags.parse(argc, argv);
  if (flags.has("help")) {
    std::printf("usage: momoe-train --config FILE [flags]\n%s", flags.usage().c_str());
    return 0;
  }
  if (!parsed.ok()) return fail(parsed, nullptr);
  if (!flags.positional().empty()) {
    return fail(invalid_argument_error("unexpected argument '", flags.positional()[0], "'"), nullptr);
  }
  if (!flags.has("config")) return fail(invalid_argument_error("--config FILE is required"), nullptr);
  if (flags.has("log-level")) {
    StatusOr<LogLevel> level = parse_log_level(flags.get("log-level"));
    if (!level.ok()) return fail(level.status(), nullptr);
    set_log_level(*level);
  }
  StatusOr<int64_t> ep = flags.get_int("ep", 0);
  if (!ep.ok()) return fail(ep.status(), nullptr);
  if (*ep < 0) return fail(invalid_argument_error("--ep ", *ep, " must be >= 1"), nullptr);
  StatusOr<RunConfig> cfg =
      load_run_config(flags.get("config"), flags.get_all("set"), static_cast<int>(*ep));
  if (!cfg.ok()) return fail(cfg.status(), nullptr);

  StatusOr<comm::World> world = comm::make_world(&argc, &argv, cfg->parallel.backend, cfg->parallel.timeout_seconds);
  if (!world.ok()) return fail(world.status(), nullptr);
  set_log_rank(world->rank());

  TrainerOptions opts;
  opts.run_dir = flags.get("run-dir", "runs/" + std::filesystem::path(flags.get("config")).stem().string());
  opts.resume = !flags.has("fresh");
  if (env::fault_rank() == world->rank() && env::fault_step() >= 0) {
    const int64_t at = env::fault_step();
    opts.after_step = [at](int64_t done) {
      if (done == at) {
        log_error("fault injection: killing this rank after step ", done, " (MOMOE_FAULT_STEP)");
        std::raise(SIGKILL);
      }
    };
  }
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(*cfg, opts, world->comm.get());
  if (!trainer.ok()) return fail(trainer.status(), &*world);
  Status s = (*trainer)->run();
  if (!s.ok()) return fail(s, &*world);
  return 0;
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) { return moe::run(argc, argv); }
