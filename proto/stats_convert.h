// Step statistics <-> protobuf bytes, and the RUN_DIR/stats.pb file: a sequence of
// length-delimited StepStats records (varint length, then the message), appended once per step.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/base/step_stats.h"

namespace moe {

std::string serialize_step_stats(const StepStatsInfo& stats);
StatusOr<StepStatsInfo> parse_step_stats(const std::string& bytes);

// Appends records to a stats file (created if missing). Crash-safe in the sense that matters for
// an append-only log: open() truncates a torn last record (a run killed mid-write, a full disk)
// before anything is appended after it, and an append that fails part-way is cut back, so the
// file is always a sequence of whole records.
class StatsFileWriter {
 public:
  StatsFileWriter() = default;
  ~StatsFileWriter();
  StatsFileWriter(const StatsFileWriter&) = delete;
  StatsFileWriter& operator=(const StatsFileWriter&) = delete;
  // *note receives a line when a torn or unreadable tail was cut off ("" otherwise).
  Status open(const std::string& path, std::string* note);
  Status append(const StepStatsInfo& stats);  // written with one write(2)
  Status sync();                              // fsync: the records survive a power cut
  void close();

 private:
  int fd_ = -1;
  int64_t size_ = 0;  // bytes of whole records
  std::string path_;
};

struct StatsFileContents {
  std::vector<StepStatsInfo> steps;
  bool truncated_tail = false;  // the last record is cut off (a live run mid-write, or a kill)
  int64_t bytes_read = 0;       // offset just after the last whole record
  // A record that does not parse (a file damaged outside momoe, or written by an old version
  // after a torn record): reading stops there; the records before it are returned.
  int64_t damaged_at = -1;      // its offset, or -1
};

// Reads the whole records from `offset` on. Neither a cut-off last record nor a damaged record
// is an error (both are reported in the result); kNotFound when the file cannot be opened.
StatusOr<StatsFileContents> read_stats_file(const std::string& path, int64_t offset = 0);

}  // namespace moe
