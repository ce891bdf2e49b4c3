#include "comm/watchdog.h"

#include "base/logging.h"

namespace moe::comm {

Watchdog::Watchdog(std::vector<Communicator*> comms, double timeout_seconds, double poll_seconds)
    : comms_(std::move(comms)), timeout_seconds_(timeout_seconds), poll_seconds_(poll_seconds) {
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
  ++generation_;
  what_ = what;
  armed_at_ = std::chrono::steady_clock::now();
}

void Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
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
    const uint64_t generation = generation_;
    const std::string what = what_;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - armed_at_).count();
    lock.unlock();
    std::string why;
    for (Communicator* c : comms_) {
      if (c == nullptr) continue;
      if (const Status error = c->poll_device_error(); !error.ok()) {
        why = str_cat(what, " failed on rank ", c->rank(), " (", c->backend_name(),
                      "): ", error.to_string());
        break;
      }
    }
    if (why.empty() && elapsed > timeout_seconds_) {
      why = str_cat(what, " has not finished after ", static_cast<int64_t>(elapsed), " s (bound ",
                    timeout_seconds_, " s): a peer is lost or stalled");
    }
    lock.lock();
    // The section may have ended (or another begun) while the communicators were polled.
    if (why.empty() || !armed_ || stop_ || generation != generation_) continue;
    lock.unlock();
    log_error("watchdog: ", why, "; aborting the device communicators");
    for (Communicator* c : comms_) {
      if (c != nullptr) c->abort_device("watchdog: " + why);
    }
    lock.lock();
    fired_ = why;  // published only once every communicator is aborted (fired() promises that)
  }
}

}  // namespace moe::comm
