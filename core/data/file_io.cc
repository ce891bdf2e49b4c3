#include "core/data/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace moe::data {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// write(2) until done or an error (retrying EINTR and short writes).
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

uint64_t fnv1a64_update(uint64_t hash, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= kFnv1a64Prime;
  }
  return hash;
}

uint32_t crc32_of(const void* data, size_t size) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  // zlib takes uInt lengths; feed large buffers in chunks.
  constexpr size_t kChunk = size_t{1} << 30;
  while (size > 0) {
    const size_t n = size < kChunk ? size : kChunk;
    crc = ::crc32(crc, p, static_cast<uInt>(n));
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
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

Status write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = str_cat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return internal_error("cannot create ", tmp, " (for ", path, "): ", errno_text(errno));
  }
  for (std::string_view part : parts) {
    if (!write_all(fd, part.data(), part.size())) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return internal_error("cannot write ", tmp, " (for ", path, "): ", errno_text(err));
    }
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return internal_error("cannot fsync ", tmp, " (for ", path, "): ", errno_text(err));
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return internal_error("cannot close ", tmp, " (for ", path, "): ", errno_text(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return internal_error("cannot rename ", tmp, " to ", path, ": ", errno_text(err));
  }
  // Make the rename itself durable. Failure to open the folder is not an error for the caller:
  // the data is already complete under its final name.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::OK();
}

StatusOr<std::string> read_file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found_error("file not found: ", path);
    return internal_error("cannot open ", path, ": ", errno_text(err));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return internal_error("cannot read ", path, ": not a regular file");
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return internal_error("cannot read ", path, ": ", errno_text(err));
    }
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}

}  // namespace moe::data
