// Graceful stop for the executables: SIGINT (Ctrl-C), SIGTERM (schedulers' preemption and time
// limits), SIGHUP and SIGUSR1 (Slurm's --signal, and what mpirun forwards unchanged to every
// rank). The first such signal only sets a flag that the trainer reads at its next step
// boundary (finish the step, save a checkpoint, exit with kExitStopped); a second one restores
// the default action and re-raises itself, stopping the process at once.
#pragma once

namespace moe {

void install_stop_signal_handlers();
// The first stop signal received (0: none). Async-signal-safe to read.
int stop_signal();
const char* stop_signal_name(int sig);  // "SIGTERM", ...

}  // namespace moe
