// The one unit of crash-safe file I/O and checksums, shared by the data pipeline (vocabulary,
// token cache) and the checkpoints: a file is written to a temporary name, flushed and renamed;
// a checkpoint directory is built under "<dir>.tmp" and renamed into place only when complete,
// so a crash never leaves a half file or a half checkpoint that looks whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"

namespace moe::io {

// Writes `parts` (concatenated) to a temporary name unique to this process and call in the same
// folder, fsyncs it, renames it over `path`, fsyncs the folder. On failure the temporary file is
// removed and `path` is left as it was (kInternal naming the file and the system error).
// Concurrent writers of the same content are safe (the last rename wins).
Status write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts);
inline Status write_file_atomic(const std::string& path, const std::string& bytes) {
  return write_file_atomic(path, std::vector<std::string_view>{bytes});
}
// The whole file. kNotFound naming the path (and the system error) when it cannot be opened,
// kInvalidArgument when it is not a regular file (a directory, say), kDataLoss when reading fails
// part way.
StatusOr<std::string> read_file(const std::string& path);
// CRC-32 as zlib computes it (the gzip/PNG polynomial); crc32_of("123456789") == 0xCBF43926.
uint32_t crc32_of(std::string_view bytes);
inline uint32_t crc32_of(const void* data, size_t n) {
  return crc32_of(std::string_view(static_cast<const char*>(data), n));
}
// Continues a CRC: crc32_update(crc32_of(a), b.data(), b.size()) == crc32_of(a + b); start at 0.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);
// Streams the file in 1 MiB blocks (never holds it whole). Errors as read_file.
StatusOr<uint32_t> crc32_of_file(const std::string& path);
Status fsync_path(const std::string& path);  // a file or a directory
// "0x0123456789abcdef" / "0x01234567".
std::string hex64(uint64_t value);
// Seconds since the Unix epoch (for the names of files kept aside).
int64_t unix_time_seconds();
// `base` when nothing exists there, else the first free "base-2", "base-3", ...
std::string unused_path(const std::string& base);
std::string hex32(uint32_t value);

// Renames `from` to `to` (one rename(2), so atomic) and fsyncs the parent folder(s): durable
// when it returns. A crash point (crash_point.h) precedes it.
Status rename_durable(const std::string& from, const std::string& to);
// Removes a file or a directory tree entry by entry, deepest first (each unlink and rmdir a crash
// point). A missing path is not an error.
Status remove_tree(const std::string& path);
// Removes a tree so that no crash leaves a half-deleted tree under its own name: it is renamed to
// path + kTrashSuffix first, then removed. Whoever finds a "*.trash" name may remove it.
Status discard_tree(const std::string& path);
inline constexpr const char* kTrashSuffix = ".trash";
inline constexpr const char* kTmpSuffix = ".tmp";

// A new, empty temporary folder ($TMPDIR or /tmp, "<prefix>_XXXXXX"), removed with everything in
// it when the object goes, however the scope ends. Movable.
class TempDir {
 public:
  static StatusOr<TempDir> create(const std::string& prefix);
  TempDir() = default;
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A directory under construction. Files go into path() (final_dir + ".tmp"); commit() makes it
// visible as `final_dir` in one rename, so a name without ".tmp" is always whole. A crash before
// commit leaves only the ".tmp" directory, which loaders ignore and the next begin() removes.
class AtomicDirectory {
 public:
  // Creates final_dir + ".tmp" (removing a stale one left by a crash).
  static StatusOr<AtomicDirectory> begin(const std::string& final_dir);
  // Uses an existing temporary directory that another rank began (multi-rank checkpoints).
  static AtomicDirectory attach(const std::string& final_dir);
  const std::string& path() const { return tmp_; }
  const std::string& final_path() const { return final_; }
  // fsyncs every file and directory under path() and path() itself, renames it to final_dir,
  // fsyncs the parent. kFailedPrecondition when path() does not exist (committed already);
  // kFailedPrecondition too when final_dir exists (the caller decides what happens to it).
  Status commit();

 private:
  std::string final_;
  std::string tmp_;
};

}  // namespace moe::io
