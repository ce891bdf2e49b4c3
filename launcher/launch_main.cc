// momoe-launch: builds and runs the multi-rank command line for a momoe job, and prints it.
//
//   momoe-launch -np 8 -- momoe-train --config configs/momentum.pbtxt --ep 8         (one node)
//   momoe-launch -np 64 --hostfile hosts --ranks-per-node 8 -- momoe-train ... --ep 8
//   (inside a Slurm allocation the line is srun; --launcher mpirun|srun forces one)
//
// Each rank starts through `momoe-launch --rank-exec -- CMD`, which binds the rank to a GPU by its
// node-local rank (CUDA_VISIBLE_DEVICES = local_rank mod GPUs, unless already set) and then execs
// CMD. NCCL_*, MOMOE_*, OMPI_MCA_*, UCX_*, OPENBLAS_NUM_THREADS and OMP_NUM_THREADS pass through.
// The printed line is shell-quoted (it can be pasted), and Ctrl-C or SIGTERM to momoe-launch
// stops every rank gracefully (see run_child).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/device.h"
#include "base/logging.h"

extern char** environ;

namespace moe {
namespace {

const char* kPassPrefixes[] = {"NCCL_",
                               "MOMOE_",
                               "OMPI_MCA_",
                               "UCX_",
                               "OPENBLAS_NUM_THREADS",
                               "OMP_NUM_THREADS",
                               "CUDA_VISIBLE_DEVICES"};

// The word as a POSIX shell reads it back: bare when it holds only characters no shell treats
// specially, else single-quoted (a ' inside becomes '\'').
std::string quote(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-./:=,@%+", c) != nullptr;
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A whole positive integer, or -1 ("4abc", "", "0", "-2" and overflow are all -1).
int positive_int(const std::string& v) {
  if (v.empty() || v.size() > 9) return -1;
  for (char c : v) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  }
  const int n = std::atoi(v.c_str());
  return n >= 1 ? n : -1;
}

// The launcher (mpirun or srun) runs as a child so that a stop signal reaches every rank as a
// graceful one: the first SIGINT/SIGTERM/SIGHUP becomes SIGUSR1 for the launcher, which both
// forward unchanged to every rank (Open MPI's mpirun would instead answer SIGINT/SIGTERM with
// SIGTERM to the ranks and SIGKILL one second later); a second one is forwarded as SIGTERM.
volatile std::sig_atomic_t g_child = 0;
volatile std::sig_atomic_t g_signals = 0;

void forward(int) {
  if (g_child <= 0) return;
  ::kill(g_child, g_signals++ == 0 ? SIGUSR1 : SIGTERM);
}

int run_child(std::vector<std::string>& line) {
  std::vector<char*> args;
  for (std::string& s : line) args.push_back(s.data());
  args.push_back(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    std::fprintf(stderr, "momoe-launch: fork failed: %s\n", std::strerror(errno));
    return 1;
  }
  if (child == 0) {
    execvp(args[0], args.data());
    std::fprintf(stderr, "momoe-launch: cannot run %s (is it installed and on PATH?)\n", args[0]);
    _exit(127);
  }
  g_child = child;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = forward;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaction(sig, &sa, nullptr);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return 1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int usage(const char* why) {
  // --help prints on stdout (exit 0), a mistake on stderr (exit 2).
  std::FILE* out = why == nullptr ? stdout : stderr;
  if (why != nullptr) std::fprintf(stderr, "momoe-launch: %s\n", why);
  std::fprintf(out,
               "usage: momoe-launch -np N [--hostfile FILE] [--ranks-per-node M]\n"
               "                    [--launcher mpirun|srun] [--dry-run] -- COMMAND [ARGS...]\n"
               "  -np N              ranks in all\n"
               "  --hostfile FILE    hosts to spread them over (default: this one)\n"
               "  --ranks-per-node M ranks per host (default: N on one host)\n"
               "  --launcher         mpirun (default) or srun\n"
               "  --dry-run          print the command instead of running it\n"
               "example: momoe-launch -np 4 -- build/launcher/momoe-train --config "
               "configs/momentum.pbtxt --ep 2\n");
  return 2;
}

// The per-rank trampoline: GPU binding by node-local rank, then exec.
int rank_exec(std::vector<std::string> cmd) {
  const int local = node_local_rank();
  const int gpus = cuda_device_count();
  if (local >= 0 && gpus > 0 && std::getenv("CUDA_VISIBLE_DEVICES") == nullptr) {
    const std::string device = std::to_string(local % gpus);
    setenv("CUDA_VISIBLE_DEVICES", device.c_str(), 1);
  }
  std::vector<char*> argv;
  for (std::string& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "momoe-launch: cannot run %s\n", cmd[0].c_str());
  return 127;
}

// What the arguments of momoe-launch say.
struct LaunchOptions {
  int np = 0, per_node = 0;
  std::string hostfile, launcher;
  bool dry_run = false, exec_mode = false;
  std::vector<std::string> cmd;  // the command after --
};

// Reads the arguments into `o`: the exit code when they end momoe-launch here (--help, a mistake;
// a flag without its value exits 2 at once), else nullopt.
std::optional<int> parse_launch_args(int argc, char** argv, LaunchOptions* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "momoe-launch: %s needs a value\n", name);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--") {
      for (++i; i < argc; ++i) o->cmd.push_back(argv[i]);
      break;
    }
    if (a == "-np" || a == "--np") {
      const std::string v = value("-np");
      if ((o->np = positive_int(v)) < 1) {
        return usage(("-np '" + v + "' is not a positive integer").c_str());
      }
    } else if (a == "--hostfile") {
      o->hostfile = value("--hostfile");
    } else if (a == "--ranks-per-node") {
      const std::string v = value("--ranks-per-node");
      if ((o->per_node = positive_int(v)) < 1) {
        return usage(("--ranks-per-node '" + v + "' is not a positive integer").c_str());
      }
    } else if (a == "--launcher") {
      o->launcher = value("--launcher");
    } else if (a == "--dry-run") {
      o->dry_run = true;
    } else if (a == "--rank-exec") {
      o->exec_mode = true;
    } else if (a == "--help" || a == "-h") {
      usage(nullptr);
      return 0;
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  return std::nullopt;
}

// The multi-rank command line: the launcher, then this executable as each rank's trampoline
// (`--rank-exec -- CMD`). `argv0` names it when /proc/self/exe cannot.
std::vector<std::string> launch_line(const LaunchOptions& o, const char* argv0) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  const std::string me = n > 0 ? std::string(self, static_cast<size_t>(n)) : argv0;
  std::vector<std::string> line;
  if (o.launcher == "srun") {
    line = {"srun", "--ntasks", std::to_string(o.np), "--export=ALL", "--kill-on-bad-exit=1"};
    if (o.per_node > 0) line.insert(line.end(), {"--ntasks-per-node", std::to_string(o.per_node)});
  } else {
    line = {"mpirun", "-np", std::to_string(o.np), "--bind-to", "none"};
    if (!o.hostfile.empty()) line.insert(line.end(), {"--hostfile", o.hostfile});
    if (o.per_node > 0) {
      line.insert(line.end(), {"--map-by", "ppr:" + std::to_string(o.per_node) + ":node"});
    }
    if (o.hostfile.empty() && o.np > static_cast<int>(std::thread::hardware_concurrency())) {
      line.push_back("--oversubscribe");
    }
    if (geteuid() == 0) line.push_back("--allow-run-as-root");
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const std::string name = kv.substr(0, kv.find('='));
      for (const char* p : kPassPrefixes) {
        if (name.rfind(p, 0) == 0) {
          line.insert(line.end(), {"-x", name});
          break;
        }
      }
    }
  }
  line.insert(line.end(), {me, "--rank-exec", "--"});
  line.insert(line.end(), o.cmd.begin(), o.cmd.end());
  return line;
}

int run(int argc, char** argv) {
  LaunchOptions o;
  if (const std::optional<int> done = parse_launch_args(argc, argv, &o)) return *done;
  if (o.cmd.empty()) return usage("no command after --");
  if (o.exec_mode) return rank_exec(o.cmd);
  if (o.np < 1) return usage("-np N (N >= 1) is required");
  if (o.launcher.empty()) o.launcher = std::getenv("SLURM_JOB_ID") != nullptr ? "srun" : "mpirun";
  if (o.launcher != "mpirun" && o.launcher != "srun") {
    return usage("--launcher must be mpirun or srun");
  }

  std::vector<std::string> line = launch_line(o, argv[0]);
  std::string printed;
  for (const std::string& s : line) printed += (printed.empty() ? "" : " ") + quote(s);
  std::printf("momoe-launch: %s\n", printed.c_str());
  std::fflush(stdout);
  if (o.dry_run) return 0;
  return run_child(line);
}

}  // namespace
}  // namespace moe

int main(int argc, char** argv) { return moe::run(argc, argv); }
