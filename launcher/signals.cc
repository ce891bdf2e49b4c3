#include "launcher/signals.h"

#include <unistd.h>

#include <csignal>
#include <cstring>

namespace moe {
namespace {

volatile std::sig_atomic_t g_signal = 0;
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};

void write_stderr(const char* s) {
  const ssize_t ignored = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)ignored;
}

const char* g_on_first = "finishing the current step, then saving a checkpoint";
const char* g_on_second = "stopping now, without a checkpoint";

void on_signal(int sig) {
  if (g_signal != 0) {
    write_stderr("momoe: second stop signal: ");
    write_stderr(g_on_second);
    write_stderr("\n");
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_signal = sig;
  write_stderr("momoe: ");
  write_stderr(stop_signal_name(sig));
  write_stderr(" received: ");
  write_stderr(g_on_first);
  write_stderr(" (send it again to stop at once)\n");
}

}  // namespace

void install_stop_signal_handlers(const char* on_first, const char* on_second) {
  if (on_first != nullptr) g_on_first = on_first;
  if (on_second != nullptr) g_on_second = on_second;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : kStopSignals) sigaction(sig, &sa, nullptr);
}

int stop_signal() { return g_signal; }

const char* stop_signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

}  // namespace moe
