#include "core/checkpoint/file_util.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace moe::ckpt {
namespace fs = std::filesystem;

Status fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return internal_error("cannot open ", path, " to sync: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return internal_error("fsync of ", path, " failed: ", std::strerror(errno));
  return Status::OK();
}

Status write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return internal_error("cannot create ", tmp, ": ", std::strerror(errno));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) return internal_error("writing ", tmp, " failed (disk full?)");
  }
  MOE_RETURN_IF_ERROR(fsync_path(tmp));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return internal_error("cannot rename ", tmp, " to ", path, ": ", ec.message());
  const std::string dir = fs::path(path).parent_path().string();
  return fsync_path(dir.empty() ? "." : dir);
}

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found_error("cannot open ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return data_loss_error("reading ", path, " failed");
  return ss.str();
}

uint32_t crc32_of(const std::string& bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const Bytef* p = reinterpret_cast<const Bytef*>(bytes.data());
  size_t left = bytes.size();
  while (left > 0) {
    const uInt n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    crc = crc32(crc, p, n);
    p += n;
    left -= n;
  }
  return static_cast<uint32_t>(crc);
}

StatusOr<uint32_t> crc32_of_file(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  return crc32_of(bytes);
}

StatusOr<AtomicDirectory> AtomicDirectory::begin(const std::string& final_dir) {
  AtomicDirectory d = attach(final_dir);
  std::error_code ec;
  fs::remove_all(d.tmp_, ec);
  fs::create_directories(d.tmp_, ec);
  if (ec) return internal_error("cannot create ", d.tmp_, ": ", ec.message());
  return d;
}

AtomicDirectory AtomicDirectory::attach(const std::string& final_dir) {
  AtomicDirectory d;
  d.final_ = final_dir;
  d.tmp_ = final_dir + ".tmp";
  return d;
}

Status AtomicDirectory::commit() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tmp_, ec)) {
    if (entry.is_regular_file()) MOE_RETURN_IF_ERROR(fsync_path(entry.path().string()));
  }
  if (ec) return internal_error("cannot list ", tmp_, ": ", ec.message());
  MOE_RETURN_IF_ERROR(fsync_path(tmp_));
  const std::string old = final_ + ".old";
  if (fs::exists(final_)) {
    fs::remove_all(old, ec);
    fs::rename(final_, old, ec);
    if (ec) return internal_error("cannot move ", final_, " aside: ", ec.message());
  }
  fs::rename(tmp_, final_, ec);
  if (ec) return internal_error("cannot rename ", tmp_, " to ", final_, ": ", ec.message());
  fs::remove_all(old, ec);
  const std::string parent = fs::path(final_).parent_path().string();
  return fsync_path(parent.empty() ? "." : parent);
}

}  // namespace moe::ckpt
