// Crash-safe file writing and checksums for checkpoints: a file is written to a temporary name,
// flushed and renamed; a checkpoint directory is built under "<dir>.tmp" and renamed into place
// only when complete, so a crash never leaves a half checkpoint that looks whole.
#pragma once

#include <cstdint>
#include <string>

#include "core/base/check.h"

namespace moe::ckpt {

// Writes bytes to path + ".tmp.<pid>", fsyncs, renames over `path`, fsyncs the directory.
Status write_file_atomic(const std::string& path, const std::string& bytes);
// The whole file; kNotFound naming the path when it cannot be opened.
StatusOr<std::string> read_file(const std::string& path);
uint32_t crc32_of(const std::string& bytes);
StatusOr<uint32_t> crc32_of_file(const std::string& path);
Status fsync_path(const std::string& path);  // a file or a directory

// A checkpoint directory under construction. Files go into path(); commit() makes it visible as
// `final_dir` (replacing an older one of that name safely).
class AtomicDirectory {
 public:
  // Creates final_dir + ".tmp" (removing a stale one left by a crash).
  static StatusOr<AtomicDirectory> begin(const std::string& final_dir);
  // Uses an existing temporary directory that another rank began (multi-rank checkpoints).
  static AtomicDirectory attach(const std::string& final_dir);
  const std::string& path() const { return tmp_; }
  const std::string& final_path() const { return final_; }
  // fsyncs every file and the directory, renames it to final_dir, fsyncs the parent.
  Status commit();

 private:
  std::string final_;
  std::string tmp_;
};

}  // namespace moe::ckpt
