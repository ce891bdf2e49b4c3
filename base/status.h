// Status and StatusOr<T>: the error value returned at every fallible boundary (leveldb/abseil
// style). Library code never exits or prints on error; it returns a Status whose code says what
// the caller should do and whose message names the problem (field, file, rank, native error).
#pragma once

#include <cassert>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace moe {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad config, flag, shape or input file content
  kFailedPrecondition,  // wrong state (e.g. backward before forward), mismatched checkpoint
  kNotFound,            // missing file or key
  kUnavailable,         // peer lost or timed out; the job may restart from a checkpoint
  kResourceExhausted,   // out of memory, buffer capacity
  kDataLoss,            // truncated or corrupted file
  kUnimplemented,       // a feature this build or backend does not have
  kAborted,             // the job was aborted (by this rank or a peer)
  kInternal,            // any other CUDA/NCCL/MPI/system failure
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status OK() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: moe.top_k = 5 must be in [1, num_experts = 4]".
  std::string to_string() const;
  // Returns a copy whose message is prefixed with `context + ": "` (job-wide if this is).
  Status with_context(const std::string& context) const;
  // A status that every rank of the job holds alike (comm/agree.h gives such): one rank's report
  // of it is the job's, so the executables print it once (launcher/exit_status.h).
  bool job_wide() const { return job_wide_; }
  Status as_job_wide() const;
  // Marks a deliberately ignored status.
  void ignore_error() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  bool job_wide_ = false;
};

// Concatenates anything streamable into a string: str_cat("top_k = ", k, " > ", e).
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  if constexpr (sizeof...(args) > 0) (os << ... << args);
  return os.str();
}

template <typename... Args>
Status invalid_argument_error(const Args&... args) {
  return Status(StatusCode::kInvalidArgument, str_cat(args...));
}
template <typename... Args>
Status failed_precondition_error(const Args&... args) {
  return Status(StatusCode::kFailedPrecondition, str_cat(args...));
}
template <typename... Args>
Status not_found_error(const Args&... args) {
  return Status(StatusCode::kNotFound, str_cat(args...));
}
template <typename... Args>
Status unavailable_error(const Args&... args) {
  return Status(StatusCode::kUnavailable, str_cat(args...));
}
template <typename... Args>
Status resource_exhausted_error(const Args&... args) {
  return Status(StatusCode::kResourceExhausted, str_cat(args...));
}
template <typename... Args>
Status data_loss_error(const Args&... args) {
  return Status(StatusCode::kDataLoss, str_cat(args...));
}
template <typename... Args>
Status unimplemented_error(const Args&... args) {
  return Status(StatusCode::kUnimplemented, str_cat(args...));
}
template <typename... Args>
Status aborted_error(const Args&... args) {
  return Status(StatusCode::kAborted, str_cat(args...));
}
template <typename... Args>
Status internal_error(const Args&... args) {
  return Status(StatusCode::kInternal, str_cat(args...));
}

// A value or the error that prevented computing it.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    assert(!status_.ok() && "StatusOr constructed from an OK Status without a value");
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "StatusOr built from OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }
  // The value, or `fallback` on error.
  T value_or(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace moe
