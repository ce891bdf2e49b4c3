#include "comm/watchdog.h"

#include <chrono>

#include "core/base/logging.h"

namespace moe::comm {

Watchdog::Watchdog(Communicator* comm, double timeout_seconds, double poll_seconds)
    : comm_(comm), poll_seconds_(poll_seconds), timeout_seconds_(timeout_seconds) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::arm(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = true;
  what_ = what;
  armed_at_ = std::chrono::steady_clock::now();
}

void Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

void Watchdog::set_timeout(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  timeout_seconds_ = seconds;
}

std::string Watchdog::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && fired_.empty()) {
    cv_.wait_for(lock, std::chrono::duration<double>(poll_seconds_));
    if (stop_ || !armed_) continue;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - armed_at_).count();
    const std::string what = what_;
    lock.unlock();
    const Status async = comm_->poll_async_error();
    lock.lock();
    if (!armed_ || stop_) continue;
    std::string why;
    if (!async.ok()) {
      why = str_cat(what, " failed on rank ", comm_->rank(), " (", comm_->backend_name(),
                    "): ", async.to_string());
    } else if (elapsed > timeout_seconds_) {
      why = str_cat(what, " has not finished on rank ", comm_->rank(), " after ",
                    static_cast<int64_t>(elapsed), " s (parallel.timeout_seconds = ",
                    timeout_seconds_, "): a peer is lost or stalled");
    }
    if (why.empty()) continue;
    fired_ = why;
    lock.unlock();
    log_error("watchdog: " + why + "; aborting the communicator");
    static_cast<void>(comm_->abort("watchdog: " + why));
    lock.lock();
  }
}

}  // namespace moe::comm
