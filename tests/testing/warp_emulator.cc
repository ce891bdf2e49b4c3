#include "tests/testing/warp_emulator.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <cstring>
#include <memory>
#include <vector>

#include "base/check.h"
#include "base/status.h"

namespace moe::testing::emu {
namespace {

constexpr int kWarp = 32;
constexpr size_t kStackBytes = size_t{256} << 10;

enum class Wait { kRun, kWarp, kBlock, kDone };
enum class Op { kShfl, kLdmatrix, kLdmatrixTrans, kMma };
const char* op_name(Op op) {
  switch (op) {
    case Op::kShfl:
      return "shfl_xor";
    case Op::kLdmatrix:
      return "ldmatrix_x4";
    case Op::kLdmatrixTrans:
      return "ldmatrix_x4_trans";
    case Op::kMma:
      return "mma";
  }
  return "?";
}

// A fiber's stack with a page below it that faults when touched (an overflow stops the test
// instead of corrupting the heap).
class Stack {
 public:
  Stack() {
    void* p = mmap(nullptr, kGuard + kStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MOE_CHECK(p != MAP_FAILED, "warp emulator: cannot map a fiber stack");
    MOE_CHECK(mprotect(p, kGuard, PROT_NONE) == 0);
    base_ = static_cast<char*>(p);
  }
  ~Stack() { munmap(base_, kGuard + kStackBytes); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  // The kStackBytes above the guard page (the stack grows down towards it).
  char* usable() const { return base_ + kGuard; }

 private:
  static constexpr size_t kGuard = 4096;
  char* base_ = nullptr;
};

// One GPU thread: its fiber, where it waits, and a collective's operands and results.
struct Lane {
  ucontext_t context;
  std::unique_ptr<Stack> stack;
  Wait wait = Wait::kRun;
  Op op = Op::kShfl;
  int mask = 0;
  float value = 0.f;
  uint32_t address = 0;
  uint32_t a[4] = {}, b[2] = {}, r[4] = {};
  float c[4] = {};
  // cp.async: copies started since the last commit, and the committed groups, oldest first.
  struct Copy {
    void* to;
    const void* from;
  };
  std::vector<Copy> open;
  std::vector<std::vector<Copy>> groups;
};

struct Machine {
  Grid grid;
  int threads = 0, bx = 0, by = 0, current = 0;
  std::vector<unsigned char> shared;  // 128 bytes of slack for the alignment of `base`
  unsigned char* base = nullptr;
  size_t shared_bytes = 0;
  std::vector<Lane> lanes;
  ucontext_t scheduler;
  const std::function<void()>* kernel = nullptr;
  std::string fault;
};

Machine* g_machine = nullptr;  // the run in progress (run_grid is not reentrant)

Lane& me() { return g_machine->lanes[g_machine->current]; }

void fail(const std::string& what) {
  if (g_machine->fault.empty()) {
    g_machine->fault = str_cat("block (", g_machine->bx, ", ", g_machine->by, "), thread ",
                               g_machine->current, ": ", what);
  }
}

// Gives control back to the scheduler until this lane may go on.
void wait_for(Wait w) {
  Lane& lane = me();
  lane.wait = w;
  swapcontext(&lane.context, &g_machine->scheduler);
}

void lane_main() {
  (*g_machine->kernel)();
  wait_for(Wait::kDone);  // never resumed
}

// 16-bit element `col` of the 16-byte row at `address` (checked by run_ldmatrix).
uint32_t row_element(uint32_t address, int col) {
  uint16_t v;
  std::memcpy(&v, g_machine->base + address + 2 * col, sizeof(v));
  return v;
}

// Every lane of the warp gives a 16-byte row address inside shared memory: a fault names the
// first that does not.
bool rows_in_shared(const Lane* warp) {
  for (int l = 0; l < kWarp; ++l) {
    const uint32_t address = warp[l].address;
    if (address % 16 != 0 || size_t{address} + 16 > g_machine->shared_bytes) {
      g_machine->current = static_cast<int>(warp + l - g_machine->lanes.data());
      fail(str_cat("ldmatrix row address ", address, " is not a 16-byte row inside the ",
                   g_machine->shared_bytes, " bytes of shared memory"));
      return false;
    }
  }
  return true;
}

void run_ldmatrix(Lane* warp, bool trans) {
  if (!rows_in_shared(warp)) return;
  for (int l = 0; l < kWarp; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int m = 0; m < 4; ++m) {
      uint32_t lo, hi;
      if (trans) {  // column g, rows 2t and 2t + 1 of matrix m
        lo = row_element(warp[8 * m + 2 * t].address, g);
        hi = row_element(warp[8 * m + 2 * t + 1].address, g);
      } else {  // row g, columns 2t and 2t + 1
        lo = row_element(warp[8 * m + g].address, 2 * t);
        hi = row_element(warp[8 * m + g].address, 2 * t + 1);
      }
      warp[l].r[m] = lo | (hi << 16);
    }
  }
}

float half_of(uint32_t reg, int which) {
  return bf16::to_float(static_cast<uint16_t>(which == 0 ? reg & 0xffffu : reg >> 16));
}

// D = A B + C with the m16n8k16 fragment layouts (warp_mma.cuh's mma).
void run_mma(Lane* warp) {
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < kWarp; ++l) {
    const int g = l >> 2, t = l & 3;
    const Lane& x = warp[l];
    for (int h = 0; h < 2; ++h) {
      A[g][2 * t + h] = half_of(x.a[0], h);
      A[g + 8][2 * t + h] = half_of(x.a[1], h);
      A[g][2 * t + 8 + h] = half_of(x.a[2], h);
      A[g + 8][2 * t + 8 + h] = half_of(x.a[3], h);
      B[2 * t + h][g] = half_of(x.b[0], h);
      B[2 * t + 8 + h][g] = half_of(x.b[1], h);
      C[g][2 * t + h] = x.c[h];
      C[g + 8][2 * t + h] = x.c[2 + h];
    }
  }
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      for (int k = 0; k < 16; ++k) C[i][j] += A[i][k] * B[k][j];
    }
  }
  for (int l = 0; l < kWarp; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int h = 0; h < 2; ++h) {
      warp[l].c[h] = C[g][2 * t + h];
      warp[l].c[2 + h] = C[g + 8][2 * t + h];
    }
  }
}

// Carries out warp w's collective once all its lanes wait at one; false if they do not yet.
bool resolve_warp(int w) {
  Lane* warp = &g_machine->lanes[w * kWarp];
  for (int l = 0; l < kWarp; ++l) {
    if (warp[l].wait != Wait::kWarp) return false;
  }
  for (int l = 1; l < kWarp; ++l) {
    if (warp[l].op != warp[0].op || (warp[0].op == Op::kShfl && warp[l].mask != warp[0].mask)) {
      g_machine->current = w * kWarp + l;
      fail(str_cat("lane ", l, " of warp ", w, " is at ", op_name(warp[l].op),
                   " while lane 0 is at ", op_name(warp[0].op), " (divergent collective)"));
      return false;
    }
  }
  switch (warp[0].op) {
    case Op::kShfl: {
      float v[kWarp];
      for (int l = 0; l < kWarp; ++l) v[l] = warp[l].value;
      for (int l = 0; l < kWarp; ++l) warp[l].value = v[(l ^ warp[0].mask) & (kWarp - 1)];
      break;
    }
    case Op::kLdmatrix:
      run_ldmatrix(warp, false);
      break;
    case Op::kLdmatrixTrans:
      run_ldmatrix(warp, true);
      break;
    case Op::kMma:
      run_mma(warp);
      break;
  }
  for (int l = 0; l < kWarp; ++l) warp[l].wait = Wait::kRun;
  return true;
}

// Releases the block barrier once every thread waits at it.
bool resolve_barrier() {
  int waiting = 0, done = 0;
  for (const Lane& l : g_machine->lanes) {
    waiting += l.wait == Wait::kBlock;
    done += l.wait == Wait::kDone;
  }
  if (waiting == 0 || waiting + done < g_machine->threads) return false;
  if (done > 0) {
    fail(str_cat(done, " threads exited while ", waiting, " wait at block_sync"));
    return false;
  }
  for (Lane& l : g_machine->lanes) l.wait = Wait::kRun;
  return true;
}

// How many sweeps warp w waits between steps: 1 to 4, warp 0 fastest in even blocks and the
// last warps fastest in odd ones, so that a write by either kind of warp to shared memory that
// the other has yet to read shows.
int rate(int w) {
  const int r = w % 4;
  return ((g_machine->bx + g_machine->by) % 2 == 0 ? r : 3 - r) + 1;
}

// Runs one block: in each sweep, lanes in turn up to their next collective, then the collectives
// that all their lanes reached, until every thread has returned or nothing can move. Warps run
// at different rates (rate), so they drift apart between barriers: a kernel that writes shared
// memory another warp has yet to read, without a block_sync between, gives that warp the new
// values (and wrong results), as a GPU may.
void run_block() {
  Machine& m = *g_machine;
  std::memset(m.shared.data(), 0xff, m.shared.size());  // NaN bits
  for (Lane& lane : m.lanes) {
    getcontext(&lane.context);
    lane.context.uc_stack.ss_sp = lane.stack->usable();
    lane.context.uc_stack.ss_size = kStackBytes;
    lane.context.uc_link = nullptr;
    makecontext(&lane.context, lane_main, 0);
    lane.wait = Wait::kRun;
    lane.open.clear();
    lane.groups.clear();
  }
  for (int sweep = 0;; ++sweep) {
    bool moved = false;
    for (m.current = 0; m.current < m.threads && m.fault.empty(); ++m.current) {
      if (m.lanes[m.current].wait != Wait::kRun) continue;
      moved = true;  // runnable, if not in this sweep
      if (sweep % rate(m.current / kWarp) != 0) continue;
      swapcontext(&m.scheduler, &m.lanes[m.current].context);
    }
    for (int w = 0; w < m.threads / kWarp && m.fault.empty(); ++w) moved |= resolve_warp(w);
    if (m.fault.empty()) moved |= resolve_barrier();
    if (!m.fault.empty()) return;
    bool all_done = true;
    for (const Lane& l : m.lanes) all_done &= l.wait == Wait::kDone;
    if (all_done) return;
    if (!moved) {
      m.current = 0;
      fail(
          "no thread can go on: a warp's lanes wait at different points (a collective or "
          "block_sync that not all of them reach)");
      return;
    }
  }
}

}  // namespace

std::string run_grid(Grid grid, int threads, size_t shared_bytes,
                     const std::function<void()>& kernel) {
  if (threads <= 0 || threads % kWarp != 0 || threads > 1024) {
    return str_cat("run_grid: ", threads, " threads: a multiple of 32 up to 1024 is needed");
  }
  if (g_machine != nullptr) return "run_grid: called from inside a kernel (not reentrant)";
  Machine m;
  m.grid = grid;
  m.threads = threads;
  m.shared.assign(shared_bytes + 128, 0);
  const auto at = reinterpret_cast<uintptr_t>(m.shared.data());
  m.base = m.shared.data() + (128 - at % 128) % 128;
  m.shared_bytes = shared_bytes;
  m.lanes.resize(static_cast<size_t>(threads));
  for (Lane& lane : m.lanes) lane.stack = std::make_unique<Stack>();
  m.kernel = &kernel;
  g_machine = &m;
  for (m.by = 0; m.by < grid.y && m.fault.empty(); ++m.by) {
    for (m.bx = 0; m.bx < grid.x && m.fault.empty(); ++m.bx) run_block();
  }
  g_machine = nullptr;
  return m.fault;
}

int thread_x() { return g_machine->current; }
int block_x() { return g_machine->bx; }
int block_y() { return g_machine->by; }
int grid_y() { return g_machine->grid.y; }
unsigned char* dynamic_shared() { return g_machine->base; }
void block_sync() { wait_for(Wait::kBlock); }

float shfl_xor(float v, int mask) {
  Lane& lane = me();
  lane.op = Op::kShfl;
  lane.value = v;
  lane.mask = mask;
  wait_for(Wait::kWarp);
  return me().value;
}

uint32_t shared_address(const void* p) {
  const auto* q = static_cast<const unsigned char*>(p);
  if (q < g_machine->base || q >= g_machine->base + g_machine->shared_bytes) {
    fail("shared_address of a pointer outside the block's shared memory");
    return 0;
  }
  return static_cast<uint32_t>(q - g_machine->base);
}

void copy_async_16(void* shared, const void* global) {
  const auto* to = static_cast<unsigned char*>(shared);
  if (to < g_machine->base || to + 16 > g_machine->base + g_machine->shared_bytes ||
      (to - g_machine->base) % 16 != 0 || reinterpret_cast<uintptr_t>(global) % 16 != 0) {
    fail(
        "copy_async_16 needs a 16-byte destination row inside shared memory and a 16-byte "
        "aligned source");
    return;
  }
  // Until the wait the destination holds nothing a kernel may rely on: NaN bits, as if the copy
  // had landed half-way (a read before the wait, or a write into a tile another warp still
  // reads, shows in the results).
  std::memset(shared, 0xff, 16);
  me().open.push_back({shared, global});
}

void copy_async_commit() {
  Lane& lane = me();
  lane.groups.push_back(std::move(lane.open));
  lane.open.clear();
}

void copy_async_wait_groups(int newest_left) {
  Lane& lane = me();
  while (static_cast<int>(lane.groups.size()) > newest_left) {
    for (const Lane::Copy& c : lane.groups.front()) std::memcpy(c.to, c.from, 16);
    lane.groups.erase(lane.groups.begin());
  }
}

void ldmatrix_x4(uint32_t (&r)[4], uint32_t address) {
  Lane& lane = me();
  lane.op = Op::kLdmatrix;
  lane.address = address;
  wait_for(Wait::kWarp);
  std::memcpy(r, me().r, sizeof(r));
}

void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t address) {
  Lane& lane = me();
  lane.op = Op::kLdmatrixTrans;
  lane.address = address;
  wait_for(Wait::kWarp);
  std::memcpy(r, me().r, sizeof(r));
}

void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  Lane& lane = me();
  lane.op = Op::kMma;
  std::memcpy(lane.a, a, sizeof(lane.a));
  lane.b[0] = b0;
  lane.b[1] = b1;
  std::memcpy(lane.c, c, sizeof(lane.c));
  wait_for(Wait::kWarp);
  std::memcpy(c, me().c, sizeof(c));
}

uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(bf16(lo).bits) | (static_cast<uint32_t>(bf16(hi).bits) << 16);
}

}  // namespace moe::testing::emu
