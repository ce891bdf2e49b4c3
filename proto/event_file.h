// TensorBoard event files: RUN_DIR/events.out.tfevents.<unix seconds>.<host>.<pid>, TensorFlow's
// naming (TensorBoard finds a directory's event files by "tfevents" in the name and reads them in
// name order, so in start-time order). A file is a sequence of TFRecords (io/tfrecord.h), one
// Event each (proto/tensorboard.proto): the file_version "brain.Event:2" first, then what the
// writer is given: a SessionLog START at the step a process starts from, one event per
// statistics record holding its scalars (types/step_stats_scalars.h). Every event is written
// with one write(2) at once (no buffer), so a reader following a live run sees whole records;
// a process killed mid-write leaves a torn last record, which TensorBoard skips (the next
// process writes a new file). A process writes a new file, as TensorFlow does: at its START
// event TensorBoard drops what it read at that step and later, the steps a resumed run repeats.
// Not thread-safe; one writer per process and directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "types/step_stats_scalars.h"

namespace moe {

inline constexpr char kEventFilePrefix[] = "events.out.tfevents.";
inline constexpr char kEventFileVersion[] = "brain.Event:2";

// True for a file name an event writer makes ("events.out.tfevents.*").
bool is_event_file_name(std::string_view name);

// One event as plain data; exactly one of file_version, session_start and scalars is set.
struct EventInfo {
  double wall_time = 0;  // seconds since the Unix epoch
  int64_t step = 0;
  std::string file_version;
  bool session_start = false;        // a SessionLog START
  std::vector<NamedScalar> scalars;  // values are float32 on the wire
};

std::string serialize_event(const EventInfo& event);
// kDataLoss when the bytes are not an Event.
StatusOr<EventInfo> parse_event(std::string_view bytes);

struct EventFileContents {
  std::vector<EventInfo> events;  // in file order, up to the first damaged record
  int64_t damaged_at = -1;        // that record's offset (a bad checksum, a torn tail), or -1
};
// Reads an event file as TensorBoard does: record by record, stopping at the first damaged
// one. kNotFound when the file cannot be read; kDataLoss when an intact record is not an Event.
StatusOr<EventFileContents> read_event_file(const std::string& path);

class EventFileWriter {
 public:
  // Creates a new event file in the existing folder `dir` (a ".<n>" suffix when this process
  // already made one this second) and writes its file_version event. kInternal naming the file
  // and the system error on failure.
  static StatusOr<std::unique_ptr<EventFileWriter>> create(const std::string& dir);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // A SessionLog START at `step`: TensorBoard forgets what earlier files hold at steps >= step.
  Status write_start(int64_t step);
  // One event holding `scalars` at `step`.
  Status write_scalars(int64_t step, const std::vector<NamedScalar>& scalars);
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Status write(const EventInfo& event);

  int fd_ = -1;
  std::string path_;
};

}  // namespace moe
