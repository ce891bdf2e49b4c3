#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "base/check.h"
#include "base/tensor.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOE_CPU_RELAX() _mm_pause()
#else
#define MOE_CPU_RELAX() static_cast<void>(0)
#endif

namespace moe {
namespace {

thread_local ThreadPool* t_current_pool = nullptr;
thread_local int t_region_depth = 0;

// How long an idle worker polls for the next job before it sleeps: long enough to bridge the gap
// between two kernels of a step, short enough not to burn a core between steps.
constexpr auto kSpinFor = std::chrono::microseconds(200);

}  // namespace

ThreadPool::ThreadPool(int threads, bool fine_grained)
    : threads_(std::max(1, threads)), fine_grained_(fine_grained) {
  workers_.reserve(threads_ - 1);
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

namespace {

// Waits for done() by polling; every 64 polls gives the core away, so that a worker holding the
// last chunk gets to run when the process has more threads than it has cores (ranks sharing a
// machine, other jobs): a bare pause loop would burn the caller's whole time slice instead.
template <typename Done>
void poll_until(Done done) {
  for (uint32_t polls = 1; !done(); ++polls) {
    MOE_CPU_RELAX();
    if (polls % 64 == 0) sched_yield();
  }
}

}  // namespace

void ThreadPool::work_on(const Job& job) {
  ParallelRegion region;
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1);
    if (c >= job.chunks) return;
    const int64_t begin = c * job.chunk;
    job.fn(begin, std::min(job.n, begin + job.chunk));
    done_chunks_.fetch_add(1);
  }
}

void ThreadPool::worker_loop() {
  DeviceAccessScope device_scope;  // workers only ever run kernel code
  uint64_t seen = 0;
  for (;;) {
    // Poll, then sleep until the generation moves on.
    const auto spin_until = std::chrono::steady_clock::now() + kSpinFor;
    int polls = 0;
    while (generation_.load() == seen) {
      MOE_CPU_RELAX();
      if (++polls % 64 == 0) {
        if (std::chrono::steady_clock::now() > spin_until) break;
        sched_yield();
      }
    }
    if (generation_.load() == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
    }
    active_.fetch_add(1);
    seen = generation_.load();
    if (stop_.load()) {
      active_.fetch_sub(1);
      return;
    }
    const Job* job = job_.load();
    if (job != nullptr) work_on(*job);
    active_.fetch_sub(1);
  }
}

void ThreadPool::run(int64_t n, int64_t grain, RangeFn fn) {
  grain = std::max<int64_t>(grain, 1);
  std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
  if (threads_ == 1 || n <= grain || !busy.owns_lock()) {
    ParallelRegion region;
    fn(0, n);
    return;
  }
  Job job{fn, n, 1, 0};
  // About four ranges per thread for balance, none shorter than the grain.
  job.chunk = std::max(grain, (n + 4 * threads_ - 1) / (4 * threads_));
  job.chunks = (n + job.chunk - 1) / job.chunk;
  next_chunk_.store(0);
  done_chunks_.store(0);
  job_.store(&job);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  work_on(job);
  poll_until([&] { return done_chunks_.load() >= job.chunks; });
  // Workers that woke for this job may still hold a pointer to it: wait until they have left.
  job_.store(nullptr);
  poll_until([&] { return active_.load() == 0; });
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int default_threads(int ranks_in_process) {
  const int cores = available_cores();
  const unsigned machine = std::thread::hardware_concurrency();
  int sharing = std::max(1, ranks_in_process);
  if (machine == 0 || static_cast<unsigned>(cores) >= machine) {
    for (const char* var :
         {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
      const char* v = std::getenv(var);
      if (v != nullptr && std::atoi(v) > 0) {
        sharing *= std::atoi(v);
        break;
      }
    }
  }
  return std::max(1, cores / sharing);
}

ThreadPool* current_thread_pool() { return t_current_pool; }

bool in_parallel_region() { return t_region_depth > 0; }
ParallelRegion::ParallelRegion() { ++t_region_depth; }
ParallelRegion::~ParallelRegion() { --t_region_depth; }

ParallelScope::ParallelScope(ThreadPool* pool) : previous_(t_current_pool) {
  t_current_pool = pool;
}
ParallelScope::~ParallelScope() { t_current_pool = previous_; }

}  // namespace moe
