// Graceful stop for the executables: SIGINT (Ctrl-C), SIGTERM (schedulers' preemption and time
// limits), SIGHUP and SIGUSR1 (Slurm's --signal, and what mpirun forwards unchanged to every
// rank). The first such signal only sets a flag that the trainer reads at its next step
// boundary (finish the step, save a checkpoint, exit with kExitStopped); a second one restores
// the default action and re-raises itself, stopping the process at once.
#pragma once

namespace moe {

// `on_first`: what the process does after the first signal, for the line it prints (default:
// "finishing the current step, then saving a checkpoint"); `on_second`: after a second one
// (default: "stopping now, without a checkpoint"). String literals (read in the handler).
void install_stop_signal_handlers(const char* on_first = nullptr, const char* on_second = nullptr);
// The first stop signal received (0: none). Async-signal-safe to read.
int stop_signal();
const char* stop_signal_name(int sig);  // "SIGTERM", ...

}  // namespace moe
