// Helpers for the data-pipeline tests: a unique temporary folder removed at the end of the test,
// and writers for plain and gzip files (through zlib directly, not the code under test).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace moe::data::testing {

class TempDir {
 public:
  TempDir();  // <tmp>/momoe_data_test_<pid>_<counter>_<test name>
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

void write_file(const std::string& path, const std::string& bytes);
void write_gzip(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);
// Whole gzip file decompressed with zlib's gzread.
std::string read_gzip(const std::string& path);
bool contains(const std::string& haystack, const std::string& needle);

}  // namespace moe::data::testing
