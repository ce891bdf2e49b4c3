#include "io/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <vector>

#include "io/crash_point.h"

namespace moe::io {
namespace fs = std::filesystem;
namespace {

std::string parent_of(const std::string& path) {
  const std::string dir = fs::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// write(2) until done, retrying on EINTR and short writes.
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// fsyncs every regular file and directory under dir (not dir itself), deepest first.
Status fsync_tree(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> dirs;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory()) {
      dirs.push_back(it->path().string());
    } else if (it->is_regular_file()) {
      MOE_RETURN_IF_ERROR(fsync_path(it->path().string()));
    }
  }
  if (ec) return internal_error("cannot list ", dir, ": ", ec.message());
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) MOE_RETURN_IF_ERROR(fsync_path(*it));
  return Status::OK();
}

// Reads `path` from start to end in blocks of at most `block` bytes, retrying on EINTR;
// fn(data, n, file size as fstat reports it, or 0). Errors name the file and the system's reason.
Status read_blocks(const std::string& path, size_t block,
                   const std::function<void(const char*, size_t, uint64_t)>& fn) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found_error("file not found: ", path);
    return not_found_error("cannot open ", path, ": ", std::strerror(err));
  }
  struct stat st;
  if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument_error("cannot read ", path, ": not a regular file");
  }
  const uint64_t size =
      ::fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
  std::vector<char> buf(block);
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      return data_loss_error("reading ", path, " failed: ", std::strerror(err));
    }
    if (r == 0) break;
    fn(buf.data(), static_cast<size_t>(r), size);
  }
  ::close(fd);
  return Status::OK();
}

}  // namespace

Status fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return internal_error("cannot open ", path, " to sync: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return internal_error("fsync of ", path, " failed: ", std::strerror(err));
  return Status::OK();
}

Status write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = str_cat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return internal_error("cannot create ", tmp, " (for ", path, "): ", std::strerror(errno));
  }
  size_t bytes = 0;
  bool written = true;
  for (std::string_view part : parts) {
    written = written && write_all(fd, part.data(), part.size());
    bytes += part.size();
  }
  const int write_errno = errno;
  const bool synced = written && ::fsync(fd) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (!written || !synced || !closed) {
    ::unlink(tmp.c_str());
    return internal_error(!written  ? "writing "
                          : !synced ? "fsync of "
                                    : "closing ",
                          tmp, " (", bytes, " bytes for ", path,
                          ") failed: ", std::strerror(!written ? write_errno : sync_errno));
  }
  crash_point(str_cat("rename ", tmp, " -> ", path));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return internal_error("cannot rename ", tmp, " to ", path, ": ", std::strerror(err));
  }
  return fsync_path(parent_of(path));
}

Status rename_durable(const std::string& from, const std::string& to) {
  crash_point(str_cat("rename ", from, " -> ", to));
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return internal_error("cannot rename ", from, " to ", to, ": ", std::strerror(errno));
  }
  MOE_RETURN_IF_ERROR(fsync_path(parent_of(to)));
  if (parent_of(from) != parent_of(to)) MOE_RETURN_IF_ERROR(fsync_path(parent_of(from)));
  return Status::OK();
}

Status remove_tree(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (ec || !fs::exists(st)) return Status::OK();
  if (fs::is_directory(st)) {
    std::vector<std::string> children;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      children.push_back(it->path().string());
    }
    if (ec) return internal_error("cannot list ", path, ": ", ec.message());
    std::sort(children.begin(), children.end());
    for (const std::string& c : children) MOE_RETURN_IF_ERROR(remove_tree(c));
    crash_point(str_cat("rmdir ", path));
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
      return internal_error("cannot remove ", path, ": ", std::strerror(errno));
    }
    return Status::OK();
  }
  crash_point(str_cat("unlink ", path));
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return internal_error("cannot remove ", path, ": ", std::strerror(errno));
  }
  return Status::OK();
}

Status discard_tree(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return Status::OK();
  const std::string trash = path + kTrashSuffix;
  MOE_RETURN_IF_ERROR(remove_tree(trash));  // a leftover of an earlier crash
  MOE_RETURN_IF_ERROR(rename_durable(path, trash));
  MOE_RETURN_IF_ERROR(remove_tree(trash));
  return fsync_path(parent_of(path));
}

StatusOr<std::string> read_file(const std::string& path) {
  std::string out;
  MOE_RETURN_IF_ERROR(
      read_blocks(path, size_t{1} << 16, [&](const char* p, size_t n, uint64_t size) {
        if (out.empty() && size > 0) out.reserve(size);
        out.append(p, n);
      }));
  return out;
}

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  uLong c = crc;
  const Bytef* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = ::crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

uint32_t crc32_of(std::string_view bytes) { return crc32_update(0, bytes.data(), bytes.size()); }

int64_t unix_time_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string unused_path(const std::string& base) {
  std::error_code ec;
  std::string path = base;
  for (int k = 2; std::filesystem::exists(std::filesystem::symlink_status(path, ec)); ++k) {
    path = base + "-" + std::to_string(k);
  }
  return path;
}

std::string hex64(uint64_t value) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(value));
  return buf;
}

std::string hex32(uint32_t value) {
  char buf[11];
  std::snprintf(buf, sizeof(buf), "0x%08x", value);
  return buf;
}

StatusOr<uint32_t> crc32_of_file(const std::string& path) {
  uint32_t crc = 0;
  MOE_RETURN_IF_ERROR(read_blocks(path, size_t{1} << 20, [&](const char* p, size_t n, uint64_t) {
    crc = crc32_update(crc, p, n);
  }));
  return crc;
}

StatusOr<TempDir> TempDir::create(const std::string& prefix) {
  std::error_code ec;
  std::string templ = (fs::temp_directory_path(ec) / (prefix + "_XXXXXX")).string();
  if (ec) templ = "/tmp/" + prefix + "_XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    return internal_error("cannot create a temporary folder like ", templ, ": ",
                          std::strerror(errno));
  }
  TempDir d;
  d.path_ = templ;
  return d;
}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) fs::remove_all(path_, ec);
}

StatusOr<AtomicDirectory> AtomicDirectory::begin(const std::string& final_dir) {
  AtomicDirectory d = attach(final_dir);
  MOE_RETURN_IF_ERROR(remove_tree(d.tmp_));  // stale, from a crash
  std::error_code ec;
  fs::create_directories(d.tmp_, ec);
  if (ec) return internal_error("cannot create ", d.tmp_, ": ", ec.message());
  return d;
}

AtomicDirectory AtomicDirectory::attach(const std::string& final_dir) {
  AtomicDirectory d;
  // "run/ckpt-1/" and "run/ckpt-1" name the same directory; the suffixes need the bare name.
  d.final_ = final_dir;
  while (d.final_.size() > 1 && d.final_.back() == '/') d.final_.pop_back();
  d.tmp_ = d.final_ + kTmpSuffix;
  return d;
}

Status AtomicDirectory::commit() {
  std::error_code ec;
  if (!fs::is_directory(tmp_, ec)) {
    return failed_precondition_error("commit: ", tmp_, " is not a directory");
  }
  if (fs::exists(fs::symlink_status(final_, ec))) {
    return failed_precondition_error("commit: ", final_, " exists; move it aside first");
  }
  MOE_RETURN_IF_ERROR(fsync_tree(tmp_));
  MOE_RETURN_IF_ERROR(fsync_path(tmp_));
  return rename_durable(tmp_, final_);
}

}  // namespace moe::io
