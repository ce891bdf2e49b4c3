// A watchdog for device backends (NCCL), whose collectives are enqueued on a stream and never
// block the host: a lost or stalled peer shows up as the step's one wait never returning. While
// armed, a thread polls the communicator's asynchronous error every `poll_seconds`; on an error,
// or when an armed section outlasts the timeout, it logs why (naming the section) and aborts
// the communicator (NCCL: ncclCommAbort, which releases the blocked wait; with an MPI bootstrap,
// MPI_Abort ends the job), so a hang becomes an error message instead of a silent stop.
//
// Host backends (Local, MPI) bound their own waits and are not thread-safe to poll from another
// thread: do not put a watchdog on them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "comm/communicator.h"

namespace moe::comm {

class Watchdog {
 public:
  Watchdog(Communicator* comm, double timeout_seconds, double poll_seconds = 1.0);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts timing a section ("step 12"); disarm() ends it. Sections do not nest.
  void arm(const std::string& what);
  void disarm();
  void set_timeout(double seconds);
  // Why it aborted the communicator ("" while it has not).
  std::string fired() const;

 private:
  void loop();

  Communicator* comm_;
  double poll_seconds_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  double timeout_seconds_;
  bool armed_ = false;
  bool stop_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point armed_at_;
  std::string fired_;
  std::thread thread_;
};

}  // namespace moe::comm
