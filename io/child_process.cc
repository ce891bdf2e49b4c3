#include "io/child_process.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include "base/check.h"

extern char** environ;

namespace moe::io {
namespace {

void close_fd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

// This process's environment with `overrides` ("NAME=value") replacing or adding entries.
std::vector<std::string> child_environment(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    bool replaced = false;
    for (const std::string& o : overrides) {
      const size_t eq = o.find('=');
      MOE_CHECK(eq != std::string::npos, "environment override ", o, " has no '='");
      if (std::strncmp(*e, o.c_str(), eq + 1) == 0) replaced = true;
    }
    if (!replaced) env.emplace_back(*e);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  return env;
}

}  // namespace

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return str_cat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return str_cat("was killed by signal ", WTERMSIG(status));
  return str_cat("ended with wait status ", status);
}

StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::spawn(std::vector<std::string> args,
                                                            const SpawnOptions& options) {
  MOE_CHECK(!args.empty(), "ChildProcess::spawn without a program");
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->args_ = std::move(args);
  std::vector<char*> argv;
  for (std::string& a : child->args_) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = child_environment(options.env);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  // [0] read end, [1] write end; close-on-exec, so only the dup2'd copies reach the child.
  int to_child[2] = {-1, -1}, from_child[2] = {-1, -1};
  const auto close_all = [&] {
    for (int* fd : {&to_child[0], &to_child[1], &from_child[0], &from_child[1]}) close_fd(fd);
  };
  if (options.pipes && (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0)) {
    const int err = errno;
    close_all();
    return internal_error("cannot create pipes for ", child->command_line(), ": ",
                          std::strerror(err));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (options.pipes) {
    posix_spawn_file_actions_adddup2(&actions, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&actions, from_child[1], 1);
  } else if (options.stdout_to_stderr) {
    posix_spawn_file_actions_adddup2(&actions, 2, 1);
  }
  // The child starts with default dispositions for the signals it is stopped with, and nothing
  // blocked: an ignored SIGTERM inherited from our environment would make the destructor's
  // SIGTERM-and-wait hang.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults, none;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGPIPE);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  const int err = posix_spawnp(&child->pid_, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    close_all();
    child->pid_ = -1;
    return internal_error("cannot start ", child->args_[0], ": ", std::strerror(err));
  }
  if (options.pipes) {
    close_fd(&to_child[0]);
    close_fd(&from_child[1]);
    child->stdin_fd_ = to_child[1];
    child->stdout_fd_ = from_child[0];
  }
  return child;
}

ChildProcess::~ChildProcess() {
  close_stdin();
  close_fd(&stdout_fd_);
  if (pid_ > 0 && !status_.has_value()) {
    StatusOr<std::optional<int>> done = try_wait();
    if (done.ok() && !done->has_value()) {
      kill(SIGTERM);
      wait().status().ignore_error();
    }
  }
}

std::string ChildProcess::command_line() const {
  std::string s = "`";
  for (size_t i = 0; i < args_.size(); ++i) s += (i > 0 ? " " : "") + args_[i];
  return s + "`";
}

Status ChildProcess::write_line(std::string_view line) {
  MOE_CHECK(stdin_fd_ >= 0, "ChildProcess::write_line without a pipe to ", command_line());
  std::string bytes(line);
  bytes += '\n';
  // A child that has gone away makes write() raise SIGPIPE, which would end this process: block
  // it on this thread and take back one we caused.
  sigset_t pipe_set, old_set, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(stdin_fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == EPIPE && !was_pending) {
    const timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  if (err == EPIPE) return unavailable_error(command_line(), " no longer reads its input");
  if (err != 0) {
    return internal_error("writing to ", command_line(), ": ", std::strerror(err));
  }
  return Status::OK();
}

StatusOr<std::optional<std::string>> ChildProcess::read_line() {
  MOE_CHECK(stdout_fd_ >= 0 || eof_, "ChildProcess::read_line without a pipe from ",
            command_line());
  while (true) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return std::optional<std::string>(std::move(line));
    }
    if (eof_) {
      if (buffer_.empty()) return std::optional<std::string>();
      return std::optional<std::string>(std::exchange(buffer_, std::string()));
    }
    char chunk[4096];
    const ssize_t n = ::read(stdout_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return internal_error("reading from ", command_line(), ": ", std::strerror(errno));
    if (n == 0) {
      eof_ = true;
      close_fd(&stdout_fd_);
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

void ChildProcess::close_stdin() { close_fd(&stdin_fd_); }

void ChildProcess::kill(int signal) {
  if (pid_ > 0 && !status_.has_value()) ::kill(pid_, signal);
}

StatusOr<std::optional<int>> ChildProcess::try_wait() {
  if (status_.has_value()) return status_;
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      status_ = status;
      return status_;
    }
    if (done == 0) return std::optional<int>();
    if (errno != EINTR) {
      return internal_error("waiting for ", command_line(), ": ", std::strerror(errno));
    }
  }
}

StatusOr<int> ChildProcess::wait() {
  if (status_.has_value()) return *status_;
  int status = 0;
  while (::waitpid(pid_, &status, 0) != pid_) {
    if (errno != EINTR) {
      return internal_error("waiting for ", command_line(), ": ", std::strerror(errno));
    }
  }
  status_ = status;
  return status;
}

}  // namespace moe::io
