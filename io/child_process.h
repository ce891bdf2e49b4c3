// Child processes started with posix_spawnp (no code of ours runs between fork and exec, so it is
// safe in a multi-threaded process): `momoe-data prepare` run by momoe-train and momoe-eval, and
// `momoe-data tokenize` run by momoe-generate over pipes (launcher/momoe_data_process.h).
//
// The child's stderr is this process's stderr. Its stdout is this process's stdout, or stderr
// (stdout_to_stderr: our stdout stays ours), or a pipe read by read_line(); its stdin is ours, or
// a pipe written by write_line(). The pipe ends this process keeps are close-on-exec, so no other
// child inherits them. Not thread-safe: one thread drives a child.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace moe::io {

struct SpawnOptions {
  // "NAME=value" entries set in the child's environment (replacing NAME's value, if any); the
  // rest of the environment is this process's.
  std::vector<std::string> env;
  // The child's stdout goes to this process's stderr.
  bool stdout_to_stderr = false;
  // Pipes to the child's stdin and from its stdout (write_line, read_line); overrides
  // stdout_to_stderr.
  bool pipes = false;
};

class ChildProcess {
 public:
  // Starts args[0] (searched on the PATH when it has no '/') with `args`. kInternal naming the
  // program and the system error when it cannot be started.
  static StatusOr<std::unique_ptr<ChildProcess>> spawn(std::vector<std::string> args,
                                                       const SpawnOptions& options);
  // Closes the pipes; a child still running gets SIGTERM and is waited for (no zombie, no
  // orphan).
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // "`prog arg1 arg2`" (for messages).
  std::string command_line() const;

  // Pipes only. write_line writes `line` and a '\n' (kUnavailable when the child has closed its
  // stdin or ended; SIGPIPE is neither raised nor left pending). read_line returns the next line
  // of the child's stdout without its '\n', or nullopt at its end (the child closed it, or ended);
  // kInternal on a read error.
  Status write_line(std::string_view line);
  StatusOr<std::optional<std::string>> read_line();
  // Closes the child's stdin (it sees end of input).
  void close_stdin();

  // Sends `signal` to the child while it runs.
  void kill(int signal);
  // The wait status (<sys/wait.h> WIFEXITED, ...) once the child has ended: try_wait returns
  // nullopt while it runs; wait blocks. kInternal when waiting fails.
  StatusOr<std::optional<int>> try_wait();
  StatusOr<int> wait();

 private:
  ChildProcess() = default;

  std::vector<std::string> args_;
  pid_t pid_ = -1;
  std::optional<int> status_;  // set once reaped
  int stdin_fd_ = -1;          // our end of the pipe to its stdin
  int stdout_fd_ = -1;         // our end of the pipe from its stdout
  std::string buffer_;         // read from stdout_fd_, not yet returned
  bool eof_ = false;
};

// "exited with code 3" / "was killed by signal 9" for a wait status.
std::string describe_wait_status(int status);

}  // namespace moe::io
