// A watchdog for device backends (NCCL), whose collectives are enqueued on a stream and never
// block the host: a lost or stalled peer shows up as a wait that never returns. While a section
// is armed, a thread polls every communicator's device error (Communicator::poll_device_error)
// every `poll_seconds`; on an error, or when the section outlasts the timeout, it logs why
// (naming the section and the rank) and aborts every device communicator
// (Communicator::abort_device: ncclCommAbort), which releases the blocked wait. The thread that
// ran the collectives then fails, and its error path aborts the job (with MPI, MPI_Abort), so a
// hang becomes an error message instead of a silent stop. The watchdog itself calls only the
// thread-safe device hooks, never a host backend.
//
// The timeout is a hang bound, not a collective timeout: it times a whole section (a training
// step, a save, an evaluation), so it should be generous (the trainer uses
// parallel.setup_timeout_seconds).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"

namespace moe::comm {

class Watchdog {
 public:
  // `comms`: the communicators to poll and abort (the world and its groups); null entries are
  // skipped. They must outlive the watchdog.
  Watchdog(std::vector<Communicator*> comms, double timeout_seconds, double poll_seconds = 1.0);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts timing a section ("step 12"); disarm() ends it. Sections do not nest.
  void arm(const std::string& what);
  void disarm();
  // Why it aborted: "" until it has fired and every communicator's abort_device has returned.
  std::string fired() const;

 private:
  void loop();

  std::vector<Communicator*> comms_;
  double timeout_seconds_;
  double poll_seconds_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool stop_ = false;
  uint64_t generation_ = 0;  // bumped by every arm(): a verdict about an old section is dropped
  std::string what_;
  std::chrono::steady_clock::time_point armed_at_;
  std::string fired_;
  std::thread thread_;
};

}  // namespace moe::comm
