#include "proto/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "base/device.h"
#include "io/file_util.h"
#include "io/tfrecord.h"
#include "proto/tensorboard.pb.h"

namespace moe {
namespace {

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

bool is_event_file_name(std::string_view name) {
  return name.substr(0, std::strlen(kEventFilePrefix)) == kEventFilePrefix;
}

std::string serialize_event(const EventInfo& event) {
  momoe::tensorboard::Event msg;
  msg.set_wall_time(event.wall_time);
  msg.set_step(event.step);
  if (!event.file_version.empty()) {
    msg.set_file_version(event.file_version);
  } else if (event.session_start) {
    msg.mutable_session_log()->set_status(momoe::tensorboard::SessionLog::START);
  } else {
    momoe::tensorboard::Summary* summary = msg.mutable_summary();
    for (const NamedScalar& s : event.scalars) {
      momoe::tensorboard::SummaryValue* v = summary->add_value();
      v->set_tag(s.tag);
      v->set_simple_value(static_cast<float>(s.value));
    }
  }
  return msg.SerializeAsString();
}

StatusOr<EventInfo> parse_event(std::string_view bytes) {
  momoe::tensorboard::Event msg;
  if (!msg.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return data_loss_error("not a TensorBoard Event (", bytes.size(), " bytes)");
  }
  EventInfo e;
  e.wall_time = msg.wall_time();
  e.step = msg.step();
  e.file_version = msg.file_version();
  e.session_start =
      msg.has_session_log() && msg.session_log().status() == momoe::tensorboard::SessionLog::START;
  for (const momoe::tensorboard::SummaryValue& v : msg.summary().value()) {
    e.scalars.push_back({v.tag(), v.simple_value()});
  }
  return e;
}

StatusOr<EventFileContents> read_event_file(const std::string& path) {
  MOE_ASSIGN_OR_RETURN(std::string bytes, io::read_file(path));
  EventFileContents out;
  size_t offset = 0;
  while (offset < bytes.size()) {
    StatusOr<std::string> record = io::read_tfrecord(bytes, &offset);
    if (!record.ok()) {
      out.damaged_at = static_cast<int64_t>(offset);
      break;
    }
    StatusOr<EventInfo> event = parse_event(*record);
    if (!event.ok()) return data_loss_error(path, ": ", event.status().message());
    out.events.push_back(std::move(*event));
  }
  return out;
}

StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::create(const std::string& dir) {
  const std::string base = str_cat(dir, "/", kEventFilePrefix, io::unix_time_seconds(), ".",
                                   host_name(), ".", ::getpid());
  std::string path = base;
  int fd = -1;
  for (int n = 1; n <= 1000; ++n) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
    path = str_cat(base, ".", n);
  }
  if (fd < 0) return internal_error("cannot create ", path, ": ", std::strerror(errno));
  std::unique_ptr<EventFileWriter> w(new EventFileWriter(fd, path));
  EventInfo version;
  version.wall_time = wall_time_now();
  version.file_version = kEventFileVersion;
  MOE_RETURN_IF_ERROR(w->write(version));
  return w;
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status EventFileWriter::write_start(int64_t step) {
  EventInfo e;
  e.wall_time = wall_time_now();
  e.step = step;
  e.session_start = true;
  return write(e);
}

Status EventFileWriter::write_scalars(int64_t step, const std::vector<NamedScalar>& scalars) {
  EventInfo e;
  e.wall_time = wall_time_now();
  e.step = step;
  e.scalars = scalars;
  return write(e);
}

Status EventFileWriter::write(const EventInfo& event) {
  const std::string record = io::tfrecord_frame(serialize_event(event));
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return internal_error("cannot append to ", path_, ": ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::OK();
}

}  // namespace moe
