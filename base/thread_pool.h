// The CPU backend's threads: one pool per host Context (the CPU's "stream"), and parallel_for,
// which kernels call to spread independent work over the pool of the Context they run on.
//
// Determinism contract: parallel_for hands out ranges of indices; which thread runs a range and
// how ranges are cut may change with the thread count, so a kernel must compute each output from
// its own index range only (no shared accumulator). Reductions cut their input into blocks whose
// size does not depend on the thread count (FixedBlocks, blocked_sum below) and add the block
// results in block order, or give each output column to one thread: a kernel's bits are the
// same at 1, 2 or 64 threads.
//
// Kernel entry points open a ParallelScope for their Context (MOE_KERNEL_ENTRY); code outside one
// (tests calling a reference directly) runs parallel_for inline on the calling thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace moe {

// A non-owning reference to a callable void(int64_t begin, int64_t end).
class RangeFn {
 public:
  template <typename F>
  RangeFn(const F& f)  // NOLINT: implicit, like std::function_ref
      : obj_(&f),
        call_([](const void* o, int64_t b, int64_t e) { (*static_cast<const F*>(o))(b, e); }) {}
  void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

 private:
  const void* obj_;
  void (*call_)(const void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  // threads >= 1: the calling thread plus threads - 1 workers. fine_grained (tests): every
  // parallel_for is cut as finely as it allows and GEMMs into many small tiles, so that small
  // test shapes exercise the threaded paths.
  explicit ThreadPool(int threads, bool fine_grained = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }
  bool fine_grained() const { return fine_grained_; }

  // Calls fn(begin, end) over ranges covering [0, n) exactly once, each at least `grain` long
  // (except the last), on every thread of the pool; returns when all have run. Runs inline when
  // the pool has one thread, when n fits one grain, when called from inside a pool task, or when
  // another thread is already using the pool.
  void run(int64_t n, int64_t grain, RangeFn fn);

 private:
  struct Job {
    RangeFn fn;
    int64_t n = 0;
    int64_t chunk = 1;
    int64_t chunks = 0;
  };
  void worker_loop();
  void work_on(const Job& job);

  const int threads_;
  const bool fine_grained_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one run() at a time

  std::mutex mu_;  // guards sleeping on wake_
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};  // moves on once per job (and at shutdown)
  std::atomic<const Job*> job_{nullptr};
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int64_t> done_chunks_{0};
  std::atomic<int> active_{0};  // workers that may still hold job_
  std::atomic<bool> stop_{false};
};

// The cores this process may run on (its CPU affinity mask; at least 1).
int available_cores();

// The threads a rank uses when its config says 0 (parallel.threads): the cores it may run on,
// shared among the ranks of its node. A launcher that pinned the rank (an affinity mask smaller
// than the machine) already gave it its share; otherwise the cores are divided among
// `ranks_in_process` (ranks run as threads of this process) times the MPI ranks on this node
// (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS or SLURM_NTASKS_PER_NODE).
int default_threads(int ranks_in_process);

// The pool parallel_for uses on this thread (nullptr: run inline).
ThreadPool* current_thread_pool();

// Makes `pool` the current pool of this thread until the scope closes (nullptr is allowed).
class ParallelScope {
 public:
  explicit ParallelScope(ThreadPool* pool);
  ~ParallelScope();
  ParallelScope(const ParallelScope&) = delete;
  ParallelScope& operator=(const ParallelScope&) = delete;

 private:
  ThreadPool* previous_;
};

// True while this thread runs the body of a parallel_for (at any thread count, inline or not):
// code that would split its own work (a GEMM cutting itself into tiles) runs whole instead. It
// depends on the call site only, never on the thread count.
bool in_parallel_region();

// Marks this thread as inside a parallel_for body until the scope closes.
class ParallelRegion {
 public:
  ParallelRegion();
  ~ParallelRegion();
  ParallelRegion(const ParallelRegion&) = delete;
  ParallelRegion& operator=(const ParallelRegion&) = delete;
};

// fn(begin, end) over [0, n) on the current pool (see ThreadPool::run). A parallel_for inside
// another's body runs inline.
inline void parallel_for(int64_t n, int64_t grain, RangeFn fn) {
  if (n <= 0) return;
  ThreadPool* pool = current_thread_pool();
  if (pool != nullptr && pool->fine_grained()) grain = 1;
  if (pool == nullptr || n <= grain || in_parallel_region()) {
    ParallelRegion region;
    fn(0, n);
  } else {
    pool->run(n, grain, fn);
  }
}

// The threads parallel_for would use here (1 outside a scope).
inline int parallel_threads() {
  ThreadPool* pool = current_thread_pool();
  return pool == nullptr ? 1 : pool->threads();
}

// A reduction's blocks: [0, n) cut into ceil(n / block) pieces of `block` indices (the last may
// be shorter). The cut depends only on n and block, never on the thread count.
struct FixedBlocks {
  int64_t n = 0;
  int64_t block = 1;
  int64_t count() const { return n <= 0 ? 0 : (n + block - 1) / block; }
  int64_t begin(int64_t b) const { return b * block; }
  int64_t end(int64_t b) const { return b * block + block < n ? b * block + block : n; }
};

// Element counts per parallel range for loops doing a few operations per element; below this a
// loop stays on one thread (waking workers costs more than it saves).
constexpr int64_t kElementGrain = int64_t{1} << 14;

// A grain in rows for a loop over rows of `row_cost` elements each.
inline int64_t row_grain(int64_t row_cost) {
  return row_cost >= kElementGrain ? 1 : kElementGrain / (row_cost > 0 ? row_cost : 1);
}

// sum over the fixed blocks of [0, n) of partial(begin, end), added in block order: the same bits
// at any thread count.
template <typename S, typename F>
S blocked_sum(int64_t n, int64_t block, const F& partial) {
  const FixedBlocks blocks{n, block};
  std::vector<S> parts(static_cast<size_t>(blocks.count()));
  parallel_for(blocks.count(), 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) parts[b] = partial(blocks.begin(b), blocks.end(b));
  });
  S total{};
  for (const S& p : parts) total += p;
  return total;
}

}  // namespace moe
