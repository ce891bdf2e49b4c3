#include "core/train/run_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>

#include "base/device.h"
#include "io/file_util.h"
#include "proto/event_file.h"

namespace moe {
namespace fs = std::filesystem;
namespace {

std::string local_time(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

// The holder line, trimmed.
std::string read_holder(int fd) {
  std::string out(512, '\0');
  const ssize_t n = ::pread(fd, out.data(), out.size(), 0);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\0')) out.pop_back();
  return out;
}

}  // namespace

StatusOr<RunDirectoryLock> RunDirectoryLock::acquire(const std::string& run_dir,
                                                     std::string* note) {
  note->clear();
  const std::string path = run_dir + "/lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return internal_error("cannot open the run-directory lock ", path, ": ", std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_holder(fd);
    ::close(fd);  // not ours: the holder's line stays as it is
    if (err == EWOULDBLOCK) {
      return failed_precondition_error(
          "run directory ", run_dir, " is in use by another job (",
          holder.empty() ? "holder unknown" : holder,
          "); wait for it to finish, stop it, or choose another --run-dir");
    }
    return internal_error("cannot lock ", path, ": ", std::strerror(err));
  }
  RunDirectoryLock lock;
  lock.fd_ = fd;
  const std::string previous = read_holder(fd);
  if (!previous.empty()) {
    *note = str_cat("took over the stale lock of ", run_dir, " (", previous,
                    ": no longer running; it did not exit cleanly)");
  }
  const std::string me = str_cat("momoe-train pid ", ::getpid(), " on host ", host_name(),
                                 ", since ", local_time("%Y-%m-%d %H:%M:%S"), "\n");
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    return internal_error("cannot write the run-directory lock ", path, ": ", std::strerror(errno));
  }
  return lock;
}

RunDirectoryLock::RunDirectoryLock(RunDirectoryLock&& other) noexcept : fd_(other.fd_) {
  other.fd_ = -1;
}

RunDirectoryLock& RunDirectoryLock::operator=(RunDirectoryLock&& other) noexcept {
  if (this != &other) {
    this->~RunDirectoryLock();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) != 0) {
    // The holder line stays; the next job reads it as a stale lock, which is harmless.
  }
  ::close(fd_);  // releases the flock
  fd_ = -1;
}

StatusOr<std::string> archive_previous_run(const std::string& run_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  int checkpoints = 0;
  bool stats = false;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0) {
      names.push_back(name);
      ++checkpoints;
    } else if (name == "stats.pb") {
      names.push_back(name);
      stats = true;
    } else if (name == "metrics.jsonl" || is_event_file_name(name)) {
      names.push_back(name);  // the live copies of stats.pb's records (JSON lines, TensorBoard)
    }
  }
  if (ec) return internal_error("cannot list ", run_dir, ": ", ec.message());
  if (names.empty()) return std::string();
  const std::string dest = io::unused_path(run_dir + "/archive/" + local_time("%Y%m%d-%H%M%S"));
  fs::create_directories(dest, ec);
  if (ec) return internal_error("cannot create ", dest, ": ", ec.message());
  for (const std::string& name : names) {
    MOE_RETURN_IF_ERROR(io::rename_durable(run_dir + "/" + name, dest + "/" + name));
  }
  return str_cat("moved the previous run's files (", checkpoints, " checkpoint director",
                 checkpoints == 1 ? "y" : "ies", stats ? ", stats.pb" : "", ") to ", dest);
}

std::string new_run_id() {
  std::random_device rd;
  const uint64_t hi = rd(), lo = rd();
  const uint64_t t =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return io::hex64(((hi << 32) | lo) ^ (t * 0x9e3779b97f4a7c15ull)).substr(2);
}

}  // namespace moe
