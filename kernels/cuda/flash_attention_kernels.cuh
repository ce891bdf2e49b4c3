// The fused attention kernels (flash_attention.cu launches them; flash_attention.h is the
// interface): templates over the padded head width HD, written against the warp primitives of
// kernels/cuda/warp_mma.cuh (thread_x, block_sync, shfl_xor, ldmatrix_x4, mma, pack_bf16, ...),
// which the includer declares first, so that the same text compiles for the GPU and, with
// tests/testing/warp_emulator.h's host versions of those primitives, for the CPU tests that run
// these kernels' index arithmetic (tests/kernels/flash_attention_emulation_test.cc).
//
// One block of 4 warps per 64-row tile of one (sequence, head); each warp owns 16 rows and
// multiplies on tensor cores with mma.sync (m16n8k16: bf16 operands, f32 accumulators), its
// operands read from shared memory by ldmatrix. A warp's products stay in registers: the
// accumulator layout of a 16 x 64 block of scores is the A-operand layout of the next product,
// so P (and dS) go from one product to the next without a trip through shared memory. Heads are
// zero-padded to HD = 32, 64 or 128 columns in shared memory, which changes no dot product. The
// inner tiles (K and V, or Q and dO) are double-buffered: the next tile's copies (cp.async,
// 16-byte words where the views allow) are in flight while the current one is multiplied.
//
// Lane layout (PTX ISA, mma.m16n8k16): lane 4 g + t holds, of each 16 x 8 accumulator block,
// rows g and g + 8 at columns 2 t and 2 t + 1 (row_of, col_of). A row's columns are spread over
// the four lanes of a quad, so row sums and maxima end in two xor shuffles, which give every lane
// of the quad the same bits (+ and max commute).
//
// Forward, per query tile, one pass over the key tiles (online softmax): s = scale (q . k) on
//   tensor cores; per row the running max m and sum l of exp(s - m) (f32); P~ = exp(s - m)
//   (times the dropout scale where kept) rounded to bf16; acc = acc exp(m_old - m) + P~ V (f32);
//   at the end O = acc / l, rounded to bf16 once, and lse = m + log(l), saved. (The first
//   version took two passes, recomputing s to form P = exp(s - lse) directly: 3 products per
//   score instead of 2.)
// Backward, two kernels, neither with atomics:
//   dq: per query tile: D_i = sum_j P_ij m_ij dP_ij (dP = dO V^T, m the dropout scale) formed as
//       dO_i . O_i from the forward's bf16 output, as flash attention does (f32), and saved;
//       then, with P = exp(s - lse) from the saved lse, dS = P (m dP - D), rounded to bf16,
//       and dQ = scale dS K: 3 products per score. (The first version formed D from P and dP
//       in a pass of its own: 5.)
//   dkv: per key tile, over the query tiles at or below the diagonal: with S^T = K Q^T and
//       dP^T = V dO^T, dV = (P m)^T dO and dK = scale dS^T Q, both operands rounded to bf16.
// Where this differs from the CPU reference (kernels/cpu/attention_ref.cc), value for value:
// the reference keeps P and dS in f32, sums softmax rows in double and forms D from P and dP
// (here the rounded output's error carries into D). The error this adds is bounded in
// tests/testing/attention_bound.h, which the GPU test checks element by element (the bound is a
// running-error analysis: it holds for any order of the f32 sums).
// Rows past S and head columns past Dh are zeros in shared memory and are never stored.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "base/dtype.h"
#include "kernels/attention.h"
#include "kernels/cpu/attention_ref.h"

namespace moe::kernels::cuda::flash {

constexpr int kTile = 64;  // rows per block (queries, or keys in dkv) and per inner tile
constexpr int kWarps = kTile / 16;
constexpr int kFlashThreads = kWarps * 32;
constexpr int kBlocks8 = kTile / 8;  // 16 x 8 accumulator blocks across an inner tile

// A warp's 16 x 64 products (accumulator layout), the same as a bf16 A operand (four k-steps of
// 16), and a warp's 16 x HD output.
using Scores = float[kBlocks8][4];
using Operand = uint32_t[kTile / 16][4];
template <int HD>
using Accum = float[HD / 8][4];

// A kernel's shared memory: `Tiles` bf16 tiles of 64 x (HD + 8) (what each holds depends on the
// kernel), then `Rows` 64-float row vectors. The 8 elements of padding put the 8 row addresses
// of an ldmatrix in distinct banks.
template <int HD, int Tiles, int Rows>
struct Smem {
  static constexpr int kLd = HD + 8;
  static constexpr size_t kTileBytes = size_t{kTile} * kLd * 2;
  static constexpr size_t kRowAt = Tiles * kTileBytes;
  static constexpr size_t kBytes = kRowAt + size_t{Rows} * kTile * 4;
  static_assert(kTileBytes % 128 == 0, "tiles on 128-byte boundaries");

  unsigned char* base;
  __device__ explicit Smem(unsigned char* b) : base(b) {}
  __device__ bf16* tile(int t) const {
    return reinterpret_cast<bf16*>(base + static_cast<size_t>(t) * kTileBytes);
  }
  __device__ float* row(int k) const { return reinterpret_cast<float*>(base + kRowAt) + k * kTile; }
};
// The inner tiles are double-buffered: buffer b = tile index % 2 is multiplied while the copies
// of the next tile land in the other.
// Forward: Q; K in tiles 1, 2; V in tiles 3, 4.
template <int HD>
using ForwardSmem = Smem<HD, 5, 0>;
// dq: Q, dO (this block's queries); K in tiles 2, 3 (O in 3 until D is formed); V in 4, 5.
// (At HD 128 the forward's 85 KiB and the backward's 102 KiB allow two blocks an SM.)
template <int HD>
using DqSmem = Smem<HD, 6, 0>;
// dkv: K, V (this block's keys); Q in tiles 2, 3; dO in 4, 5; lse and D of buffer b in rows
// 2 b and 2 b + 1.
template <int HD>
using DkvSmem = Smem<HD, 6, 4>;

// Where the lane's element e (0..3) of accumulator block n lies in the warp's 16 rows and the
// block's columns; g = lane / 4, t = lane % 4.
__device__ __forceinline__ int row_of(int e, int g) { return g + (e >> 1) * 8; }
__device__ __forceinline__ int col_of(int n, int e, int t) { return n * 8 + 2 * t + (e & 1); }

__device__ __forceinline__ float quad_sum(float v) {
  v += shfl_xor(v, 1);
  return v + shfl_xor(v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, shfl_xor(v, 1));
  return fmaxf(v, shfl_xor(v, 2));
}

// --- Tiles and products ---

// Eight bf16 values moved as one 16-byte word.
struct alignas(16) Word16 {
  uint32_t w[4];
};

// The head slice's rows row0 .. row0 + 63 (columns 0 .. dh-1 of rows ld apart) into a bf16 tile;
// zeros past row `rows` and past column dh. Every thread of the block takes part. `words`: dh,
// ld and src are multiples of 8 elements from a 16-byte boundary, so 16-byte words are copied
// asynchronously: they land once this thread's copy_async_wait covers the group they are
// committed with (the caller commits), and a block_sync after that shows the whole tile.
template <int HD>
__device__ void load_tile(const bf16* src, int64_t ld, int64_t row0, int64_t rows, int dh,
                          bool words, bf16* dst) {
  constexpr int kLd = HD + 8;
  if (words) {
    constexpr int kWords = HD / 8;
    for (int x = thread_x(); x < kTile * kWords; x += kFlashThreads) {
      const int r = x / kWords, c = x % kWords * 8;
      const int64_t g = row0 + r;
      if (g < rows && c < dh) {
        copy_async_16(dst + r * kLd + c, src + g * ld + c);
      } else {
        *reinterpret_cast<Word16*>(dst + r * kLd + c) = Word16{};
      }
    }
    return;
  }
  const uint16_t* from = reinterpret_cast<const uint16_t*>(src);
  uint16_t* to = reinterpret_cast<uint16_t*>(dst);
  for (int x = thread_x(); x < kTile * HD; x += kFlashThreads) {
    const int r = x / HD, c = x % HD;
    const int64_t g = row0 + r;
    to[r * kLd + c] = (g < rows && c < dh) ? from[g * ld + c] : uint16_t{0};
  }
}

// s[16 x 64] = x[16 x HD] y[64 x HD]^T: the dot products of a warp's 16 rows of one tile with
// the 64 rows of another (bf16, ld HD + 8). Each k-step of 16 takes one A load (rows 0-7 and
// 8-15 at columns k and k + 8) and, per two blocks of 8 rows of y, one B load.
template <int HD>
__device__ __forceinline__ void rows_dot_rows(const bf16* x, const bf16* y, Scores& s) {
  constexpr int kLd = HD + 8;
  const int lane = thread_x() & 31;
  // This lane's row addresses: x rows 0-7 and 8-15 at columns 0 and 8; y rows 0-7 at columns 0
  // and 8, then rows 8-15 at the same columns. The loops add constants (bytes) to them.
  const uint32_t xa = shared_address(x + (lane & 15) * kLd + (lane >> 4) * 8);
  const uint32_t ya =
      shared_address(y + ((lane & 7) + (lane >> 4) * 8) * kLd + ((lane >> 3) & 1) * 8);
#pragma unroll
  for (int n = 0; n < kBlocks8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
  for (int k = 0; k < HD; k += 16) {
    uint32_t a[4];
    ldmatrix_x4(a, xa + k * 2);
#pragma unroll
    for (int n = 0; n < kBlocks8; n += 2) {
      uint32_t b[4];  // y rows 8n.. (columns k, k + 8), then rows 8n + 8.. (the same columns)
      ldmatrix_x4(b, ya + (n * 8 * kLd + k) * 2);
      mma(s[n], a, b[0], b[1]);
      mma(s[n + 1], a, b[2], b[3]);
    }
  }
}

// acc[16 x HD] += p[16 x 64] z[64 x HD]: p a warp's bf16 operand, z a tile (its rows are the
// k index, read transposed).
template <int HD>
__device__ __forceinline__ void accumulate_product(const Operand& p, const bf16* z,
                                                   Accum<HD>& acc) {
  constexpr int kLd = HD + 8;
  const int lane = thread_x() & 31;
  // z rows 0-15 at columns 0, then at columns 8 (each lane one row address).
  const uint32_t za = shared_address(z + (lane & 15) * kLd + (lane >> 4) * 8);
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
#pragma unroll
    for (int n = 0; n < HD / 8; n += 2) {
      uint32_t b[4];  // z rows 16k .. 16k + 15 at columns 8n, then at 8n + 8
      ldmatrix_x4_trans(b, za + (k * 16 * kLd + n * 8) * 2);
      mma(acc[n], p[k], b[0], b[1]);
      mma(acc[n + 1], p[k], b[2], b[3]);
    }
  }
}

// The bf16 A operand of values laid out as an accumulator (each rounded to nearest even).
__device__ __forceinline__ void to_operand(const Scores& v, Operand& p) {
#pragma unroll
  for (int k = 0; k < kTile / 16; ++k) {
    p[k][0] = pack_bf16(v[2 * k][0], v[2 * k][1]);
    p[k][1] = pack_bf16(v[2 * k][2], v[2 * k][3]);
    p[k][2] = pack_bf16(v[2 * k + 1][0], v[2 * k + 1][1]);
    p[k][3] = pack_bf16(v[2 * k + 1][2], v[2 * k + 1][3]);
  }
}

template <int HD>
__device__ __forceinline__ void zero(Accum<HD>& acc) {
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
}

// Rows row0 + g and row0 + g + 8 of dst (ld apart; those < rows, columns < dh) = scale * acc,
// rounded to bf16.
template <int HD>
__device__ void store_rows(const Accum<HD>& acc, float scale, bf16* dst, int64_t ld, int64_t row0,
                           int64_t rows, int dh) {
  const int lane = thread_x() & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t r = row0 + row_of(e, g);
      const int c = col_of(n, e, t);
      if (r < rows && c < dh) dst[r * ld + c] = bf16(acc[n][e] * scale);
    }
  }
}

// Every kernel's arguments (each uses the ones its stage needs).
struct FlashParams {
  AttentionArgs a;
  int dh;          // head columns (the tiles pad them to HD)
  bool words;      // load_tile may copy 16-byte words (qkv, d_out, out aligned; dh % 8 == 0)
  float scale;     // 1 / sqrt(dh), rounded to f32 (as the reference)
  float inv_keep;  // 1 / (1 - dropout), rounded to f32
  const bf16* qkv;
  const bf16* d_out;
  bf16* out;
  float* lse;   // written by the forward, read by the backward
  float* dsum;  // D per row: from the dq kernel to the dkv kernel
  bf16* d_qkv;
};

// Per-kernel coordinates: the (sequence, head) of the block, the lane's place in its warp, and
// the head's slices of qkv (ld 3 D), d_out and out (ld D).
struct Where {
  int64_t S, H, D, b, h, bh;
  int warp, g, t;
  const bf16 *q, *k, *v, *d_out;
  __device__ Where(const FlashParams& f) {
    S = f.a.seq_len;
    H = f.a.heads;
    D = H * f.dh;
    bh = block_x();
    b = bh / H;
    h = bh % H;
    warp = thread_x() >> 5;
    g = (thread_x() & 31) >> 2;
    t = thread_x() & 3;
    q = f.qkv + b * S * 3 * D + h * f.dh;
    k = q + D;
    v = q + 2 * D;
    d_out = f.d_out != nullptr ? f.d_out + b * S * D + h * f.dh : nullptr;
  }
};

// The causal rule and S over a warp's 16 x 64 block, in ints relative to the block (row ri,
// column c). kQueryRows (forward, dq): row r0 + ri is a query, column c0 + c a key; otherwise
// (dkv) the row is a key and the column a query.
template <bool kQueryRows>
struct Causal {
  int below_s;  // rows (kQueryRows) or columns inside S
  int diag;     // r0 - c0: the key is at or before the query where c <= ri + diag (or >=)
  __device__ Causal(int64_t S, int64_t r0, int64_t c0) {
    const int64_t first = kQueryRows ? r0 : c0;
    below_s = static_cast<int>(S - first < kTile ? S - first : kTile);
    diag = static_cast<int>(r0 - c0);
  }
  __device__ bool operator()(int ri, int c) const {
    return kQueryRows ? (ri < below_s && c <= ri + diag) : (c < below_s && c >= ri + diag);
  }
};

// The lane's dropout decisions over a warp's 16 x 64 block: bit 4 n + e is set where its element
// e of accumulator block n is kept (every bit without dropout). Rows r0 + ri and columns c0 + c
// are queries and keys (kQueryRows) or keys and queries. One draw per element in a loop that is
// not unrolled (Philox is long, and a call would cost the unrolled loops their registers).
template <bool kQueryRows>
__device__ uint32_t keep_bits(const FlashParams& f, const Where& w, int64_t r0, int64_t c0) {
  if (f.a.dropout == 0.f) return ~0u;
  uint32_t bits = 0;
#pragma unroll 1
  for (int x = 0; x < 32; ++x) {
    const int64_t r = r0 + row_of(x & 3, w.g), c = c0 + col_of(x >> 2, x & 3, w.t);
    if (ref::attention_keep(f.a, w.b, w.h, kQueryRows ? r : c, kQueryRows ? c : r)) {
      bits |= 1u << x;
    }
  }
  return bits;
}
// Element (n, e)'s dropout scale: 1 / (1 - p) where kept (exactly 1 without dropout), else 0.
__device__ __forceinline__ float keep_scale(uint32_t bits, int n, int e, float inv_keep) {
  return (bits >> (4 * n + e)) & 1u ? inv_keep : 0.f;
}

// The tile of this block, heavier tiles launched first: in the forward and dq the last query
// tiles (the most keys below the diagonal), in dkv the first key tiles (the most queries).
__device__ __forceinline__ int last_tiles_first() { return grid_y() - 1 - block_y(); }
__device__ __forceinline__ int first_tiles_first() { return block_y(); }

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define MOE_FLASH_SUPPORTED 1
#endif

// --- Forward ---

// A row's running max and sum of exp(s - m) in the forward's online softmax.
struct RowSoftmax {
  float m = -INFINITY, l = 0.f;
};

// The online softmax of one key tile for the lane's half-row `half` (row g + 8 half of the
// warp's 16): the row's max m and sum l over the live columns are updated, the accumulator's
// half-row is rescaled by exp(m_old - m_new), and s's entries become P~ = exp(s - m_new) times
// the dropout scale (0 where not live), which the caller rounds to bf16 for P~ V.
template <int HD>
__device__ __forceinline__ void online_softmax(const FlashParams& f, const Where& w,
                                               const Causal<true>& live, uint32_t keep, int half,
                                               Scores& s, RowSoftmax& row, Accum<HD>& acc) {
  const int ri = w.g + half * 8;
  float tmax = -INFINITY;
#pragma unroll
  for (int n = 0; n < kBlocks8; ++n) {
#pragma unroll
    for (int e = 2 * half; e < 2 * half + 2; ++e) {
      if (live(ri, col_of(n, e, w.t))) tmax = fmaxf(tmax, s[n][e] * f.scale);
    }
  }
  const float m_new = fmaxf(row.m, quad_max(tmax));
  float part = 0.f;
#pragma unroll
  for (int n = 0; n < kBlocks8; ++n) {
#pragma unroll
    for (int e = 2 * half; e < 2 * half + 2; ++e) {
      const float p = live(ri, col_of(n, e, w.t)) ? expf(s[n][e] * f.scale - m_new) : 0.f;
      part += p;
      s[n][e] = p * keep_scale(keep, n, e, f.inv_keep);
    }
  }
  part = quad_sum(part);
  if (m_new == -INFINITY) return;           // no live key yet (rows past S): nothing to rescale
  const float alpha = expf(row.m - m_new);  // 0 on the row's first live tile (m = -inf)
  row.l = row.l * alpha + part;
  row.m = m_new;
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) {
    acc[n][2 * half] *= alpha;
    acc[n][2 * half + 1] *= alpha;
  }
}

// Starts the copies of key tile kt's K and V into k_dst and v_dst (the forward's or dq's buffer
// kt % 2) and commits them, with any copies this thread started before.
template <int HD>
__device__ void start_key_tile(const FlashParams& f, const Where& w, int kt, bf16* k_dst,
                               bf16* v_dst) {
  load_tile<HD>(w.k, 3 * w.D, int64_t{kt} * kTile, w.S, f.dh, f.words, k_dst);
  load_tile<HD>(w.v, 3 * w.D, int64_t{kt} * kTile, w.S, f.dh, f.words, v_dst);
  copy_async_commit();
}

// Waits for this thread's copies of tile t (started by the previous call, or before the loop);
// the barrier then shows every thread's part of tile t and marks every warp done with the
// other buffer (tile t - 1), into which the copies of tile t + 1 start (t < last) while tile t
// is multiplied. One barrier a tile.
template <typename Start>
__device__ __forceinline__ void next_tile(int t, int last, Start start) {
  copy_async_wait<0>();
  block_sync();
  if (t < last) start(t + 1);
}

// The forward for the warp's 16 rows in one pass over the key tiles: acc = sum over tiles of
// P~ V (P~ rounded to bf16), kept scaled to the current row maxima, and each row's lse; rows past
// S get lse 0 (and an accumulator that is never stored). Key tile 0's copies are started.
template <int HD>
__device__ void forward_rows(const FlashParams& f, const Where& w, int qt,
                             const ForwardSmem<HD>& sm, float (&lse)[2], Accum<HD>& acc) {
  const int64_t r0 = int64_t{qt} * kTile + w.warp * 16;
  const bf16* my_q = sm.tile(0) + w.warp * 16 * (HD + 8);
  RowSoftmax rows[2];
  zero<HD>(acc);
  for (int kt = 0; kt <= qt; ++kt) {
    next_tile(kt, qt, [&](int t) {  // K in tiles 1 and 2, V in 3 and 4
      start_key_tile<HD>(f, w, t, sm.tile(1 + (t & 1)), sm.tile(3 + (t & 1)));
    });
    const bf16 *ks = sm.tile(1 + (kt & 1)), *vs = sm.tile(3 + (kt & 1));
    Scores s;
    rows_dot_rows<HD>(my_q, ks, s);
    const int64_t j0 = int64_t{kt} * kTile;
    const Causal<true> live(w.S, r0, j0);
    const uint32_t keep = keep_bits<true>(f, w, r0, j0);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      online_softmax<HD>(f, w, live, keep, half, s, rows[half], acc);
    }
    Operand p;
    to_operand(s, p);
    accumulate_product<HD>(p, vs, acc);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const bool in = r0 + w.g + half * 8 < w.S;
    lse[half] = in ? rows[half].m + logf(rows[half].l) : 0.f;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {  // O = acc / l, one rounding
      acc[n][2 * half] = in ? acc[n][2 * half] / rows[half].l : 0.f;
      acc[n][2 * half + 1] = in ? acc[n][2 * half + 1] / rows[half].l : 0.f;
    }
  }
}

template <int HD>
__global__ void __launch_bounds__(kFlashThreads) flash_forward_kernel(FlashParams f) {
#ifdef MOE_FLASH_SUPPORTED
  const ForwardSmem<HD> sm(dynamic_shared());
  const Where w(f);
  const int qt = last_tiles_first();
  const int64_t r0 = int64_t{qt} * kTile + w.warp * 16;
  load_tile<HD>(w.q, 3 * w.D, int64_t{qt} * kTile, w.S, f.dh, f.words, sm.tile(0));
  start_key_tile<HD>(f, w, 0, sm.tile(1), sm.tile(3));  // one group with Q's copies
  float lse[2];
  Accum<HD> acc;
  forward_rows<HD>(f, w, qt, sm, lse, acc);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = r0 + w.g + half * 8;
    if (i < w.S && w.t == 0) f.lse[w.bh * w.S + i] = lse[half];
  }
  store_rows<HD>(acc, 1.f, f.out + w.b * w.S * w.D + w.h * f.dh, w.D, r0, w.S, f.dh);
#endif
}

// --- Backward ---

// Blocks per SM the backward kernels are compiled for: three (at most 168 registers a thread,
// a few dozen bytes of spills) for heads of up to 64 columns, where left alone ptxas takes
// 240-255 registers and fits two; two at HD 128, whose dK and dV accumulators alone are 128
// floats a lane (three would spill a kilobyte).
template <int HD>
inline constexpr int kBackwardBlocks = HD <= 64 ? 3 : 2;

// A warp's operands for one inner tile of the backward: P from x y^T, dP from u z^T.
struct TileOperands {
  const bf16* x;  // the warp's 16 rows (scores)
  const bf16* y;  // the 64 rows they meet (scores)
  const bf16* u;  // the warp's 16 rows (dP)
  const bf16* z;  // the 64 rows they meet (dP)
};
// p = P (0 where not live) and dp = dP for the warp's 16 x 64 block; live(n, e) says whether the
// lane's element e of block n is causal and inside S, lse_of(n, e) gives its row's logsumexp.
template <int HD, typename Live, typename Lse>
__device__ __forceinline__ void probabilities_and_dp(const TileOperands& t, float scale, Live live,
                                                     Lse lse_of, Scores& p, Scores& dp) {
  rows_dot_rows<HD>(t.x, t.y, p);
#pragma unroll
  for (int n = 0; n < kBlocks8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) p[n][e] = live(n, e) ? expf(p[n][e] * scale - lse_of(n, e)) : 0.f;
  }
  rows_dot_rows<HD>(t.u, t.z, dp);
}

// D_i = dO_i . O_i for the lane's two rows (r0 + g, r0 + g + 8) from the block's tiles of dO and
// of the forward's bf16 output O: the quad's four lanes take every fourth column (each product
// of two bf16 values is exact in f32), then the quad's sum.
template <int HD>
__device__ void rows_d(const Where& w, const bf16* d_out_tile, const bf16* out_tile,
                       float (&d_i)[2]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int at = (w.warp * 16 + w.g + half * 8) * (HD + 8);
    float sum = 0.f;
    for (int c = w.t; c < HD; c += 4) {
      sum += static_cast<float>(d_out_tile[at + c]) * static_cast<float>(out_tile[at + c]);
    }
    d_i[half] = quad_sum(sum);
  }
}

// dQ of the warp's 16 rows over the key tiles: dS = P (m dP - D), rounded to bf16, then
// acc += dS K. Tiles 0 = Q, 1 = dO (this block's queries); key tile 0's copies are started.
template <int HD>
__device__ void dq_rows(const FlashParams& f, const Where& w, const DqSmem<HD>& sm, int qt,
                        const float (&row_lse)[2], const float (&d_i)[2], Accum<HD>& acc) {
  const int64_t r0 = int64_t{qt} * kTile + w.warp * 16;
  const int rows_at = w.warp * 16 * (HD + 8);
  for (int kt = 0; kt <= qt; ++kt) {
    next_tile(kt, qt, [&](int t) {  // K in tiles 2 and 3, V in 4 and 5
      start_key_tile<HD>(f, w, t, sm.tile(2 + (t & 1)), sm.tile(4 + (t & 1)));
    });
    bf16 *ks = sm.tile(2 + (kt & 1)), *vs = sm.tile(4 + (kt & 1));
    const int64_t j0 = int64_t{kt} * kTile;
    const Causal<true> causal(w.S, r0, j0);
    const auto live = [&](int n, int e) { return causal(row_of(e, w.g), col_of(n, e, w.t)); };
    const uint32_t keep = keep_bits<true>(f, w, r0, j0);
    Scores p, dp;
    probabilities_and_dp<HD>(
        {sm.tile(0) + rows_at, ks, sm.tile(1) + rows_at, vs}, f.scale, live,
        [&](int, int e) { return row_lse[e >> 1]; }, p, dp);
#pragma unroll
    for (int n = 0; n < kBlocks8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float g = live(n, e) ? dp[n][e] * keep_scale(keep, n, e, f.inv_keep) : 0.f;
        p[n][e] = p[n][e] * (g - d_i[e >> 1]);
      }
    }
    Operand ds;
    to_operand(p, ds);
    accumulate_product<HD>(ds, ks, acc);
  }
}

template <int HD>
__global__ void __launch_bounds__(kFlashThreads, kBackwardBlocks<HD>)
    flash_backward_dq_kernel(FlashParams f) {
#ifdef MOE_FLASH_SUPPORTED
  const DqSmem<HD> sm(dynamic_shared());
  const Where w(f);
  const int qt = last_tiles_first();
  const int64_t q0 = int64_t{qt} * kTile, r0 = q0 + w.warp * 16;
  load_tile<HD>(w.q, 3 * w.D, q0, w.S, f.dh, f.words, sm.tile(0));
  load_tile<HD>(w.d_out, w.D, q0, w.S, f.dh, f.words, sm.tile(1));
  load_tile<HD>(f.out + w.b * w.S * w.D + w.h * f.dh, w.D, q0, w.S, f.dh, f.words, sm.tile(3));
  copy_async_commit();
  start_key_tile<HD>(f, w, 0, sm.tile(2), sm.tile(4));  // in flight while D is formed
  copy_async_wait<1>();
  block_sync();
  float row_lse[2], d_i[2];
  rows_d<HD>(w, sm.tile(1), sm.tile(3), d_i);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t i = r0 + w.g + half * 8;
    row_lse[half] = i < w.S ? f.lse[w.bh * w.S + i] : 0.f;
    if (i < w.S && w.t == 0) f.dsum[w.bh * w.S + i] = d_i[half];
  }
  Accum<HD> acc;  // dq_rows' first barrier comes before key tile 1's K is copied over O
  zero<HD>(acc);
  dq_rows<HD>(f, w, sm, qt, row_lse, d_i, acc);
  store_rows<HD>(acc, f.scale, f.d_qkv + w.b * w.S * 3 * w.D + w.h * f.dh, 3 * w.D, r0, w.S, f.dh);
#endif
}

// Starts the copies of query tile qt's Q and dO into the dkv kernel's buffer qt % 2 (tiles 2 + b
// and 4 + b) and commits them (with any copies this thread started before); writes the tile's
// lse and D into rows 2 b and 2 b + 1.
template <int HD>
__device__ void start_query_tile(const FlashParams& f, const Where& w, const DkvSmem<HD>& sm,
                                 int qt) {
  const int b = qt & 1;
  const int64_t q0 = int64_t{qt} * kTile;
  load_tile<HD>(w.q, 3 * w.D, q0, w.S, f.dh, f.words, sm.tile(2 + b));
  load_tile<HD>(w.d_out, w.D, q0, w.S, f.dh, f.words, sm.tile(4 + b));
  copy_async_commit();
  for (int x = thread_x(); x < kTile; x += kFlashThreads) {
    const bool in = q0 + x < w.S;
    sm.row(2 * b)[x] = in ? f.lse[w.bh * w.S + q0 + x] : 0.f;
    sm.row(2 * b + 1)[x] = in ? f.dsum[w.bh * w.S + q0 + x] : 0.f;
  }
}

// dK and dV over one query tile qt: tiles 0 = K, 1 = V (this block's keys), the query tile's Q,
// dO, lse and D in buffer qt % 2. A warp's rows are keys j, its columns queries i.
template <int HD>
__device__ void dkv_query_tile(const FlashParams& f, const Where& w, const DkvSmem<HD>& sm,
                               int64_t k0, int qt, Accum<HD>& dk, Accum<HD>& dv) {
  const int64_t r0 = k0 + w.warp * 16, q0 = int64_t{qt} * kTile;
  const int rows_at = w.warp * 16 * (HD + 8), b = qt & 1;
  const bf16 *qs = sm.tile(2 + b), *gs = sm.tile(4 + b);
  const float *lse_t = sm.row(2 * b), *d_t = sm.row(2 * b + 1);
  const Causal<false> causal(w.S, r0, q0);
  const auto live = [&](int n, int e) { return causal(row_of(e, w.g), col_of(n, e, w.t)); };
  const uint32_t keep = keep_bits<false>(f, w, r0, q0);
  Scores p, dp;
  probabilities_and_dp<HD>(
      {sm.tile(0) + rows_at, qs, sm.tile(1) + rows_at, gs}, f.scale, live,
      [&](int n, int e) { return lse_t[col_of(n, e, w.t)]; }, p, dp);
#pragma unroll
  for (int n = 0; n < kBlocks8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float m = live(n, e) ? keep_scale(keep, n, e, f.inv_keep) : 0.f;
      const float pv = p[n][e];
      p[n][e] = pv * m;
      dp[n][e] = pv * (dp[n][e] * m - d_t[col_of(n, e, w.t)]);
    }
  }
  // One operand at a time: P m is consumed before dS is packed (fewer live registers).
  Operand op;
  to_operand(p, op);
  accumulate_product<HD>(op, gs, dv);
  to_operand(dp, op);
  accumulate_product<HD>(op, qs, dk);
}

template <int HD>
__global__ void __launch_bounds__(kFlashThreads, kBackwardBlocks<HD>)
    flash_backward_dkv_kernel(FlashParams f) {
#ifdef MOE_FLASH_SUPPORTED
  const DkvSmem<HD> sm(dynamic_shared());
  const Where w(f);
  const int kt = first_tiles_first();
  const int tiles = static_cast<int>((w.S + kTile - 1) / kTile);
  const int64_t k0 = int64_t{kt} * kTile;
  load_tile<HD>(w.k, 3 * w.D, k0, w.S, f.dh, f.words, sm.tile(0));
  load_tile<HD>(w.v, 3 * w.D, k0, w.S, f.dh, f.words, sm.tile(1));
  start_query_tile<HD>(f, w, sm, kt);  // one group with K's and V's copies
  Accum<HD> dk, dv;
  zero<HD>(dk);
  zero<HD>(dv);
  for (int qt = kt; qt < tiles; ++qt) {
    next_tile(qt, tiles - 1, [&](int t) { start_query_tile<HD>(f, w, sm, t); });
    dkv_query_tile<HD>(f, w, sm, k0, qt, dk, dv);
  }
  bf16* dst = f.d_qkv + w.b * w.S * 3 * w.D + w.h * f.dh;
  const int64_t r0 = k0 + w.warp * 16;
  store_rows<HD>(dk, f.scale, dst + w.D, 3 * w.D, r0, w.S, f.dh);
  store_rows<HD>(dv, 1.f, dst + 2 * w.D, 3 * w.D, r0, w.S, f.dh);
#endif
}

// --- Host side: parameters and launch shapes (flash_attention.cu, the emulation test) ---

// The parameters of a call, without the views' pointers.
inline FlashParams params_of(const AttentionArgs& a, int64_t dh) {
  FlashParams f{};
  f.a = a;
  f.dh = static_cast<int>(dh);
  f.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  f.inv_keep = static_cast<float>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  return f;
}

// Whether load_tile may copy 16-byte words: dh a multiple of 8 (then so are the rows' strides
// 3 D and D and every head's offset) and every loaded view on a 16-byte boundary.
inline bool copies_words(int64_t dh, std::initializer_list<const void*> views) {
  for (const void* p : views) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return dh % 8 == 0;
}

// Calls f(std::integral_constant<int, HD>) for the padded head width of dh.
template <typename Fn>
auto with_head_width(int64_t dh, Fn&& f) {
  if (dh <= 32) return f(std::integral_constant<int, 32>{});
  if (dh <= 64) return f(std::integral_constant<int, 64>{});
  return f(std::integral_constant<int, 128>{});
}

}  // namespace moe::kernels::cuda::flash
