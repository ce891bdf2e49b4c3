// Step statistics <-> protobuf bytes, and the RUN_DIR/stats.pb file: a sequence of
// length-delimited StepStats records (varint length, then the message), appended once per step.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/base/step_stats.h"

namespace moe {

std::string serialize_step_stats(const StepStatsInfo& stats);
StatusOr<StepStatsInfo> parse_step_stats(const std::string& bytes);

// Appends records to a stats file (created if missing); each append is flushed.
class StatsFileWriter {
 public:
  StatsFileWriter() = default;
  ~StatsFileWriter();
  StatsFileWriter(const StatsFileWriter&) = delete;
  StatsFileWriter& operator=(const StatsFileWriter&) = delete;
  Status open(const std::string& path);
  Status append(const StepStatsInfo& stats);
  void close();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

struct StatsFileContents {
  std::vector<StepStatsInfo> steps;
  bool truncated_tail = false;  // the last record was cut off (a run killed mid-write)
  int64_t bytes_read = 0;       // offset just after the last complete record
};

// Reads every complete record. A cut-off last record is reported, not an error (so a live run can
// be followed); a malformed complete record is kDataLoss naming the file and offset.
StatusOr<StatsFileContents> read_stats_file(const std::string& path, int64_t offset = 0);

}  // namespace moe
