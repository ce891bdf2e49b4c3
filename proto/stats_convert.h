// Step statistics <-> protobuf bytes, and the RUN_DIR/stats.pb file: StepStats records appended
// once per step (and per evaluation), each framed so that damage stays local:
//   magic "\x89MSR" | body length (u32 LE) | CRC-32 of the body | CRC-32 of these 12 bytes | body
// A reader checks both CRCs; at a damaged record (a flipped byte, a garbled length) it skips to
// the next intact header (the magic is the resync marker) and keeps every record after it. Files
// of format 1 (varint length, message; no checksums) are still read, and the writer converts
// them when it opens one.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "types/step_stats.h"

namespace moe {

std::string serialize_step_stats(const StepStatsInfo& stats);
StatusOr<StepStatsInfo> parse_step_stats(const std::string& bytes);

// The records of the live branch, in file order: each rollback marker (rollback_to) drops the
// records before it that the abandoned branch wrote (every record of a step after the one rolled
// back to: each record's step counts steps done) and is dropped itself.
std::vector<StepStatsInfo> live_records(std::vector<StepStatsInfo> records);

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
  // *note receives a line when a torn tail was cut off (kept beside the file as
  // "<path>.torn-<unix time>") or a format-1 file was converted (the original kept as
  // "<path>.format1-<unix time>"); "" otherwise. Damaged records inside the file are left
  // alone (readers skip them), and nothing else is ever cut.
  Status open(const std::string& path, std::string* note);
  Status append(const StepStatsInfo& stats);  // written with one write(2)
  Status sync();                              // fsync: the records survive a power cut
  void close();
  // The newest step the file's live records reach when open() read it (-1: none).
  int64_t last_step() const { return last_step_; }
  // Whether the file's live records held, when open() read it or since, an evaluation at `step`
  // over `eval_sequences` sequences per split (0: the whole splits).
  bool has_evaluation(int64_t step, int64_t eval_sequences) const;

 private:
  void note_evaluation(const StepStatsInfo& s);

  int fd_ = -1;
  int64_t size_ = 0;  // bytes of whole records
  int64_t last_step_ = -1;
  std::set<std::pair<int64_t, int64_t>> evaluations_;  // (step, eval_sequences)
  std::string path_;
};

struct StatsFileContents {
  std::vector<StepStatsInfo> steps;
  bool truncated_tail = false;  // the last record is cut off (a live run mid-write, or a kill)
  int64_t bytes_read = 0;       // offset just after the last whole record (or skipped damage)
  // Damaged byte ranges (offset, bytes) that were skipped: a record whose checksum or message is
  // wrong, or bytes with no intact record header. Format 2 goes on after each; format 1 stops
  // at the first.
  std::vector<std::pair<int64_t, int64_t>> damaged;
  int64_t damaged_at = -1;  // the first one's offset, or -1
  int format = 2;
};

// Reads the whole records from `offset` on. Neither a cut-off last record nor damaged records
// are an error (both are reported in the result); kNotFound when the file cannot be opened;
// kInvalidArgument when a non-empty file holds no record at all from its start (not a stats
// file).
StatusOr<StatsFileContents> read_stats_file(const std::string& path, int64_t offset = 0);

}  // namespace moe
