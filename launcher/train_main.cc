// momoe-train: trains a MoE language model from a run configuration.
//
//   momoe-train --config configs/quickstart.pbtxt [--set train.steps=100 ...] [--run-dir DIR]
//   mpirun -np 4 momoe-train --config ... --ep 2
//
// Thin by design: parse flags, load and validate the config, create the world communicator,
// build the Trainer, run it, and turn a Status into an exit code (launcher/exit_status.h;
// aborting the communicator on a fatal error so that no peer waits forever). SIGINT, SIGTERM,
// SIGHUP and SIGUSR1 stop the run gracefully (launcher/signals.h).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "base/logging.h"
#include "comm/world.h"
#include "core/train/trainer.h"
#include "io/crash_point.h"
#include "kernels/cpu/blas_library.h"
#include "launcher/env_params.h"
#include "launcher/exit_status.h"
#include "launcher/flags.h"
#include "launcher/momoe_data_process.h"
#include "launcher/signals.h"
#include "proto/run_convert.h"

namespace moe {
namespace {

int fail(const Status& s, comm::World* world) {
  return exit_with(s, world != nullptr ? world->comm.get() : nullptr);
}

// MOMOE_FAULT_* (env_params.h): kill or stall this rank after a given step.
StatusOr<std::function<void(int64_t)>> fault_injection(int rank) {
  MOE_ASSIGN_OR_RETURN(const int64_t fault_rank, env::fault_rank());
  MOE_ASSIGN_OR_RETURN(const int64_t at, env::fault_step());
  MOE_ASSIGN_OR_RETURN(const int64_t stall, env::fault_stall());
  if (fault_rank != rank || at < 0) return std::function<void(int64_t)>();
  return std::function<void(int64_t)>([at, stall](int64_t done) {
    if (done != at) return;
    if (stall != 0) {
      log_error("fault injection: rank stops responding after step ", done, " (MOMOE_FAULT_STALL)");
      std::this_thread::sleep_for(std::chrono::hours(1));
    }
    log_error("fault injection: killing this rank after step ", done, " (MOMOE_FAULT_STEP)");
    std::raise(SIGKILL);
  });
}

// The first lines of --print-config's output (comments in protobuf text format; the same for
// every config, so that printing a printed config gives back the same text).
constexpr char kPrintedConfigHeader[] =
    "# The resolved run configuration (momoe-train --print-config): every field explicit, the\n"
    "# model as explicit blocks. model.vocab_size 0: taken from the data's vocabulary.\n";

// Declares the flags of momoe-train.
void define_train_flags(FlagParser* flags) {
  flags->value("config", "run configuration (protobuf text format, momoe.RunConfig)");
  flags->value("set", "override one config field, e.g. --set train.steps=100", true);
  flags->value("run-dir",
               "run directory (statistics, checkpoints, cache); default runs/<config name>");
  flags->value("ep", "expert-parallel group size (default: parallel.ep of the config)");
  flags->switch_flag("fresh",
                     "start a new run: move an earlier run's checkpoints and stats.pb to "
                     "RUN_DIR/archive/ instead of resuming");
  flags->value("resume-from", "resume from this checkpoint directory instead of the newest one");
  flags->switch_flag("allow-config-change",
                     "resume even if the config changes what training computes");
  flags->value("log-level", "debug | info | warning | error (default info)");
  flags->switch_flag("print-config",
                     "print the resolved config (every default filled in, the --set overrides "
                     "applied) as protobuf text and exit; saved to a file, it is a --config that "
                     "trains the same run");
  flags->switch_flag("dry-run",
                     "check what the run needs (config, data, vocabulary, layout against the "
                     "ranks, memory), build the model, print the start-up summary and exit "
                     "without training; the run directory is neither created nor touched");
}

// Checks the flags, applies --log-level and the MOMOE_CRASH_* settings (env_params.h), and loads
// the config with the --set overrides.
StatusOr<RunConfig> load_config_from_flags(const FlagParser& flags) {
  if (!flags.positional().empty()) {
    return invalid_argument_error("unexpected argument '", flags.positional()[0], "'");
  }
  if (!flags.has("config")) return invalid_argument_error("--config FILE is required");
  if (flags.has("print-config") && flags.has("dry-run")) {
    return invalid_argument_error("--print-config and --dry-run exclude each other");
  }
  if (flags.has("fresh") && flags.has("resume-from")) {
    return invalid_argument_error("--fresh and --resume-from exclude each other");
  }
  if (flags.has("log-level")) {
    MOE_ASSIGN_OR_RETURN(const LogLevel level, parse_log_level(flags.get("log-level")));
    set_log_level(level);
  }
  MOE_ASSIGN_OR_RETURN(const int64_t ep, flags.get_int("ep", 0));
  if (flags.has("ep") && ep < 1) return invalid_argument_error("--ep ", ep, " must be >= 1");
  // The layout first (every rank sees the same launcher environment): a config that does not
  // divide over --ep is a later question.
  if (const int n = comm::launcher_world_size(); n > 0 && ep > n) {
    return invalid_argument_error(
        "--ep ", ep,
        n == 1 ? str_cat(" needs ", ep, " ranks, but this is a single process")
               : str_cat(" is larger than the world size ", n),
        ": launch with mpirun -np ", ep, " (or a multiple of it), or lower --ep");
  }
  for (auto param : {env::crash_at, env::crash_trace}) {
    if (!param().ok()) return param().status();
  }
  io::set_crash_at(*env::crash_at());
  io::set_crash_trace(*env::crash_trace() != 0);
  return load_run_config(flags.get("config"), flags.get_all("set"), static_cast<int>(ep));
}

// The trainer's options that the flags give.
TrainerOptions trainer_options(const FlagParser& flags) {
  TrainerOptions opts;
  opts.run_dir =
      flags.get("run-dir", "runs/" + std::filesystem::path(flags.get("config")).stem().string());
  opts.resume = !flags.has("fresh");
  opts.resume_from = flags.get("resume-from");
  opts.allow_config_change = flags.has("allow-config-change");
  opts.stop_requested = stop_signal;
  opts.dry_run = flags.has("dry-run");
  return opts;
}

// Builds the trainer on `world` and runs it: the exit code (kExitStopped when a signal stopped
// it).
int train(const RunConfig& cfg, TrainerOptions opts, comm::World* world) {
  StatusOr<std::function<void(int64_t)>> fault = fault_injection(world->rank());
  if (!fault.ok()) return fail(fault.status(), world);
  opts.after_step = *fault;
  StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(cfg, opts, world->comm.get());
  if (!trainer.ok() && trainer.status().code() == StatusCode::kAborted && stop_signal() != 0) {
    // Stopped while preparing the data (before any step): nothing to save; rerun to resume.
    log_error(trainer.status().message(), " (", stop_signal_name(stop_signal()),
              "); rerun the same command to resume");
    return kExitStopped;
  }
  if (!trainer.ok()) return fail(trainer.status(), world);
  if (opts.dry_run) {
    std::error_code ec;
    (*trainer)->coordinator().print(str_cat(
        "momoe: dry run: the config, data, layout and memory check passed and the model is built; "
        "nothing trained or written (the run directory would be ",
        opts.run_dir,
        std::filesystem::exists(opts.run_dir, ec)
            ? ", which exists: a run there resumes from its newest checkpoint, if any, unless "
              "--fresh)"
            : ")"));
    return 0;
  }
  Status s = (*trainer)->run();
  if (!s.ok()) return fail(s, world);
  return (*trainer)->stopped() ? kExitStopped : 0;
}

int run(int argc, char** argv) {
  // Until the world exists, messages carry the rank the launcher gave this process (and bad
  // input is printed by rank 0 only: exit_with).
  set_log_rank(comm::launcher_rank());
  install_stop_signal_handlers();
  data::use_momoe_data_for_sentencepiece();  // a SentencePiece corpus is prepared by momoe-data
  FlagParser flags("usage: momoe-train --config FILE [flags]\n",
                   "exit codes: 0 done, 1 failed, 2 bad input or refused, 3 stopped by a signal "
                   "after a checkpoint (rerun to resume)\n"
                   "example: momoe-train --config configs/quickstart.pbtxt --set train.steps=100 "
                   "--run-dir runs/try\n");
  define_train_flags(&flags);
  if (std::optional<int> code = flags.parse_or_exit_code(argc, argv)) return *code;
  StatusOr<RunConfig> cfg = load_config_from_flags(flags);
  if (!cfg.ok()) return exit_with_job_wide(cfg.status());  // the same on every rank
  if (flags.has("print-config")) {
    std::printf("%s%s", kPrintedConfigHeader, cfg->text.c_str());
    return 0;
  }
  // The CPU's BLAS is loaded (its kernel chosen from the CPU's features) before MPI starts
  // threads: an OPENBLAS_CORETYPE this CPU cannot run is refused here, by name.
  if (cfg->train.device == DeviceKind::kCpu) {
    if (Status blas = kernels::ref::load_blas(); !blas.ok()) return fail(blas, nullptr);
  }

  StatusOr<comm::World> world = comm::make_world(
      &argc, &argv, cfg->parallel.backend, cfg->parallel.setup_timeout_seconds, cfg->train.device);
  if (!world.ok()) return fail(world.status(), nullptr);
  set_log_rank(world->rank());
  if (!world->note.empty() && world->rank() == 0) std::printf("momoe: %s\n", world->note.c_str());
  return train(*cfg, trainer_options(flags), &*world);
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) { return moe::run(argc, argv); }
