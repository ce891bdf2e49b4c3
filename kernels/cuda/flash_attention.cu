// Fused causal attention for bf16 (flash_attention.h): one block of 4 warps per 64-row tile of
// one (sequence, head); each warp owns 16 rows and multiplies on tensor cores through WMMA
// (16 x 16 x 16 bf16 fragments, f32 accumulators). Heads are zero-padded to HD = 32, 64 or 128
// columns in shared memory, which changes no dot product.
//
// Forward, per query tile (two passes over the key tiles, so that the output accumulates in
// registers without rescaling):
//   pass 1: s = scale (q . k) on tensor cores; per row, the running max m and sum l of
//      exp(s - m) (f32); lse = m + log(l), saved.
//   pass 2: s again; P = exp(s - lse) (times the dropout scale where kept), rounded to bf16;
//      O += P V (f32); O rounded to bf16 once.
// Backward, two kernels, neither with atomics:
//   dq: per query tile: a first pass forms D_i = sum_j P_ij m_ij dP_ij (dP = dO V^T, m the
//       dropout scale) in f32 and saves it; a second forms dS = P (m dP - D), rounded to bf16,
//       and dQ = scale dS K.
//   dkv: per key tile, over the query tiles at or below the diagonal: with S^T = K Q^T and
//       dP^T = V dO^T, dV = (P m)^T dO and dK = scale dS^T Q, both operands rounded to bf16.
// Where this differs from the CPU reference (kernels/cpu/attention_ref.cc), value for value:
// the reference keeps P and dS in f32 and sums softmax rows in double. The error this adds is
// bounded in tests/testing/attention_bound.h, which the GPU test checks element by element.
// Rows past S and head columns past Dh are zeros in shared memory and are never stored.
#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>
#include <type_traits>

#include "kernels/cpu/attention_ref.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/flash_attention.h"

namespace moe::kernels::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using bfloat = __nv_bfloat16;

constexpr int kTile = 64;  // rows per block (queries, or keys in dkv) and per inner tile
constexpr int kWarps = kTile / 16;
constexpr int kFlashThreads = kWarps * 32;
constexpr int kLdS = kTile + 4;  // f32 rows of a warp's 16 x 64 products (ldm % 4 == 0)
constexpr int kLdP = kTile + 8;  // bf16 rows of a warp's 16 x 64 operands (ldm % 8 == 0)

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bfloat, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bfloat, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bfloat, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// A kernel's shared memory, in 128-byte aligned parts: `Tiles` bf16 tiles of 64 x (HD + 8) (what
// each holds depends on the kernel), `F32` f32 and `B16` bf16 16 x 64 blocks per warp, and `Rows`
// 64-float row vectors. A warp's f32 output staging (16 x (HD + 4)) reuses two tiles once the
// loop is done (2 x 64 x (HD + 8) bf16 >= 4 x 16 x (HD + 4) f32).
template <int HD, int Tiles, int F32, int B16, int Rows>
struct Smem {
  static constexpr int kLdH = HD + 8;  // bf16 tile rows
  static constexpr int kLdO = HD + 4;  // f32 staging rows
  static constexpr size_t round(size_t b) { return (b + 127) / 128 * 128; }
  static constexpr size_t kTileBytes = round(size_t{kTile} * kLdH * 2);
  static constexpr size_t kF32Bytes = round(size_t{kWarps} * 16 * kLdS * 4);
  static constexpr size_t kB16Bytes = round(size_t{kWarps} * 16 * kLdP * 2);
  static constexpr size_t kRowBytes = round(kTile * 4);
  static constexpr size_t kF32At = Tiles * kTileBytes;
  static constexpr size_t kB16At = kF32At + F32 * kF32Bytes;
  static constexpr size_t kRowAt = kB16At + B16 * kB16Bytes;
  static constexpr size_t kBytes = kRowAt + Rows * kRowBytes;
  static_assert(2 * kTileBytes >= size_t{kWarps} * 16 * kLdO * 4, "staging must fit two tiles");

  unsigned char* base;
  __device__ explicit Smem(unsigned char* b) : base(b) {}
  __device__ bfloat* tile(int t) const {
    return reinterpret_cast<bfloat*>(base + static_cast<size_t>(t) * kTileBytes);
  }
  // Warp w's 16 x 64 f32 block k and bf16 block k.
  __device__ float* f32(int k, int w) const {
    return reinterpret_cast<float*>(base + kF32At + k * kF32Bytes) + w * 16 * kLdS;
  }
  __device__ bfloat* b16(int k, int w) const {
    return reinterpret_cast<bfloat*>(base + kB16At + k * kB16Bytes) + w * 16 * kLdP;
  }
  __device__ float* row(int k) const {
    return reinterpret_cast<float*>(base + kRowAt + k * kRowBytes);
  }
  // Warp w's staging, over tiles T and T + 1 (only after the block's last read of them).
  template <int T>
  __device__ float* stage(int w) const {
    static_assert(T + 2 <= Tiles, "the staging spans two tiles");
    return reinterpret_cast<float*>(base + static_cast<size_t>(T) * kTileBytes) + w * 16 * kLdO;
  }
};
// Forward: Q, K, V; the scores; P.
template <int HD>
using ForwardSmem = Smem<HD, 3, 1, 1, 0>;
// dq: Q, dO, K, V; the scores, then dP; dS.
template <int HD>
using DqSmem = Smem<HD, 4, 1, 1, 0>;
// dkv: K, V, Q, dO; S^T, then dP^T; P^T and dS^T; the query tile's lse and D.
template <int HD>
using DkvSmem = Smem<HD, 4, 1, 2, 2>;

// The head slice's rows row0 .. row0 + 63 (columns 0 .. dh-1 of rows ld apart) into a bf16 tile;
// zeros past row `rows` and past column dh. Every thread of the block takes part.
template <int HD>
__device__ void load_tile(const bf16* src, int64_t ld, int64_t row0, int64_t rows, int dh,
                          bfloat* dst) {
  for (int x = threadIdx.x; x < kTile * HD; x += blockDim.x) {
    const int r = x / HD, c = x % HD;
    const int64_t g = row0 + r;
    const float v = (g < rows && c < dh) ? static_cast<float>(src[g * ld + c]) : 0.f;
    dst[r * (HD + 8) + c] = __float2bfloat16_rn(v);
  }
}

// out[16 x 64] (f32, ld kLdS) = a[16 x HD] times b[64 x HD]^T: the dot products of a warp's 16
// rows with the 64 rows of a tile (both bf16, ld kLdH). k runs in order: fixed sums.
template <int HD>
__device__ void rows_dot_rows(const bfloat* a, const bfloat* b, float* out) {
  constexpr int kLd = HD + 8;
  FragC acc[kTile / 16];
  for (int n = 0; n < kTile / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
  for (int k = 0; k < HD; k += 16) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + k, kLd);
    for (int n = 0; n < kTile / 16; ++n) {
      FragBCol fb;  // b's rows n*16 .. n*16+15, columns k .. k+15, read as the transpose
      wmma::load_matrix_sync(fb, b + n * 16 * kLd + k, kLd);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
  for (int n = 0; n < kTile / 16; ++n) {
    wmma::store_matrix_sync(out + n * 16, acc[n], kLdS, wmma::mem_row_major);
  }
}

// acc[16 x HD] += p[16 x 64] (bf16, ld kLdP) times b[64 x HD] (a bf16 tile, ld kLdH).
template <int HD>
__device__ void accumulate_product(const bfloat* p, const bfloat* b, FragC (&acc)[HD / 16]) {
  constexpr int kLd = HD + 8;
  for (int k = 0; k < kTile; k += 16) {
    FragA fa;
    wmma::load_matrix_sync(fa, p + k, kLdP);
    for (int n = 0; n < HD / 16; ++n) {
      FragBRow fb;
      wmma::load_matrix_sync(fb, b + k * kLd + n * 16, kLd);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Rows row0 .. row0+15 of dst (ld apart; those < rows, columns < dh) = scale * acc, rounded to
// bf16 through the warp's staging.
template <int HD>
__device__ void store_rows(FragC (&acc)[HD / 16], float* stage, float scale, bf16* dst, int64_t ld,
                           int64_t row0, int64_t rows, int dh) {
  constexpr int kLd = HD + 4;
  for (int n = 0; n < HD / 16; ++n) {
    wmma::store_matrix_sync(stage + n * 16, acc[n], kLd, wmma::mem_row_major);
  }
  __syncwarp();
  for (int x = threadIdx.x & 31; x < 16 * HD; x += 32) {
    const int r = x / HD, c = x % HD;
    if (row0 + r < rows && c < dh) store(dst, (row0 + r) * ld + c, stage[r * kLd + c] * scale);
  }
  __syncwarp();  // the staging may be written again
}

// The dropout scale of (i, j): 1 without dropout, 1 / (1 - p) where kept, 0 where dropped. The
// draw is a call (not inlined into the unrolled column loops: registers and code size).
__device__ __noinline__ float keep_scale(const AttentionArgs& a, int64_t b, int64_t h, int64_t i,
                                         int64_t j, float inv_keep) {
  return ref::attention_keep(a, b, h, i, j) ? inv_keep : 0.f;
}
__device__ __forceinline__ float drop_scale(const AttentionArgs& a, int64_t b, int64_t h, int64_t i,
                                            int64_t j, float inv_keep) {
  return a.dropout == 0.f ? 1.f : keep_scale(a, b, h, i, j, inv_keep);
}

// Per-kernel coordinates. A lane serves row r = lane / 2 of its warp's 16 and the half
// (lane % 2) of the 64 columns of each inner tile; its pair partner holds the other half.
struct Where {
  int64_t S, H, D, b, h, bh;
  int warp, r, half;
  __device__ Where(const AttentionArgs& a, int dh) {
    S = a.seq_len;
    H = a.heads;
    D = H * dh;
    bh = blockIdx.x;
    b = bh / H;
    h = bh % H;
    warp = threadIdx.x >> 5;
    r = (threadIdx.x & 31) >> 1;
    half = threadIdx.x & 1;
  }
};

__device__ __forceinline__ float pair_sum(float v) {
  return v + __shfl_xor_sync(0xffffffffu, v, 1);  // the same bits on both lanes: + commutes
}
__device__ __forceinline__ float pair_max(float v) {
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
}

// The tile of this block, heavier tiles launched first: in the forward and dq the last query
// tiles (the most keys below the diagonal), in dkv the first key tiles (the most queries).
__device__ __forceinline__ int last_tiles_first() { return gridDim.y - 1 - blockIdx.y; }
__device__ __forceinline__ int first_tiles_first() { return blockIdx.y; }

// Every kernel's arguments (each uses the ones its stage needs).
struct FlashParams {
  AttentionArgs a;
  int dh;          // head columns (the tiles pad them to HD)
  float scale;     // 1 / sqrt(dh), rounded to f32 (as the reference)
  float inv_keep;  // 1 / (1 - dropout), rounded to f32
  const bf16* qkv;
  const bf16* d_out;
  bf16* out;
  float* lse;   // written by the forward, read by the backward
  float* dsum;  // D per row: from the dq kernel to the dkv kernel
  bf16* d_qkv;
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define MOE_FLASH_SUPPORTED 1
#endif

template <int HD>
__global__ void __launch_bounds__(kFlashThreads) flash_forward_kernel(FlashParams f) {
#ifdef MOE_FLASH_SUPPORTED
  const AttentionArgs& a = f.a;
  const int dh = f.dh;
  const float scale = f.scale, inv_keep = f.inv_keep;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const ForwardSmem<HD> sm(smem_raw);
  const Where w(a, dh);
  const int qt = last_tiles_first();
  const int64_t q0 = int64_t{qt} * kTile, i = q0 + w.warp * 16 + w.r;
  const bf16* base = f.qkv + w.b * w.S * 3 * w.D + w.h * dh;
  bfloat *qs = sm.tile(0), *ks = sm.tile(1), *vs = sm.tile(2);
  const bfloat* my_q = qs + w.warp * 16 * (HD + 8);
  const float* s = sm.f32(0, w.warp) + w.r * kLdS + w.half * 32;
  bfloat* p = sm.b16(0, w.warp) + w.r * kLdP + w.half * 32;
  load_tile<HD>(base, 3 * w.D, q0, w.S, dh, qs);
  float m = -INFINITY, l = 0.f;
  for (int kt = 0; kt <= qt; ++kt) {  // pass 1: the row's max and sum
    __syncthreads();
    load_tile<HD>(base + w.D, 3 * w.D, int64_t{kt} * kTile, w.S, dh, ks);
    __syncthreads();
    rows_dot_rows<HD>(my_q, ks, sm.f32(0, w.warp));
    __syncwarp();
    const int64_t j0 = int64_t{kt} * kTile + w.half * 32;
    float tmax = -INFINITY;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      if (i < w.S && j0 + c <= i) tmax = fmaxf(tmax, s[c] * scale);
    }
    const float m_new = fmaxf(m, pair_max(tmax));
    float part = 0.f;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      if (i < w.S && j0 + c <= i) part += expf(s[c] * scale - m_new);
    }
    part = pair_sum(part);
    if (m_new != -INFINITY) {  // rows past S have no keys
      l = l * expf(m - m_new) + part;
      m = m_new;
    }
    __syncwarp();  // the scores are rewritten next tile
  }
  const float row_lse = i < w.S ? m + logf(l) : 0.f;
  if (i < w.S && w.half == 0) f.lse[w.bh * w.S + i] = row_lse;
  FragC acc[HD / 16];
  for (int n = 0; n < HD / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
  for (int kt = 0; kt <= qt; ++kt) {  // pass 2: O = P V
    __syncthreads();
    load_tile<HD>(base + w.D, 3 * w.D, int64_t{kt} * kTile, w.S, dh, ks);
    load_tile<HD>(base + 2 * w.D, 3 * w.D, int64_t{kt} * kTile, w.S, dh, vs);
    __syncthreads();
    rows_dot_rows<HD>(my_q, ks, sm.f32(0, w.warp));
    __syncwarp();
    const int64_t j0 = int64_t{kt} * kTile + w.half * 32;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int64_t j = j0 + c;
      float v = 0.f;
      if (i < w.S && j <= i) {
        v = expf(s[c] * scale - row_lse) * drop_scale(a, w.b, w.h, i, j, inv_keep);
      }
      p[c] = __float2bfloat16_rn(v);
    }
    __syncwarp();
    accumulate_product<HD>(sm.b16(0, w.warp), vs, acc);
  }
  __syncthreads();  // every warp is done with the K and V tiles: they become the staging
  store_rows<HD>(acc, sm.template stage<1>(w.warp), 1.f, f.out + w.b * w.S * w.D + w.h * dh, w.D,
                 q0 + w.warp * 16, w.S, dh);
#endif
}

// One inner tile of the backward, for a warp: its f32 block gets (its 16 rows of x) . (y's 64
// rows), from which each lane keeps P of its 32 columns in registers (pv; 0 where not live);
// then the block gets (its 16 rows of u) . (z's 64 rows): dP. `live(c)` says whether the lane's
// column c is causal and inside S; `lse_of(c)` gives that entry's row logsumexp.
struct TileOperands {
  const bfloat* x;  // the warp's 16 rows (scores)
  const bfloat* y;  // the 64 rows they meet (scores)
  const bfloat* u;  // the warp's 16 rows (dP)
  const bfloat* z;  // the 64 rows they meet (dP)
};
template <int HD, typename Live, typename Lse>
__device__ void probabilities_then_dp(float* block, const TileOperands& t, const float* mine,
                                      float scale, Live live, Lse lse_of, float (&pv)[32]) {
  rows_dot_rows<HD>(t.x, t.y, block);
  __syncwarp();
#pragma unroll
  for (int c = 0; c < 32; ++c) pv[c] = live(c) ? expf(mine[c] * scale - lse_of(c)) : 0.f;
  __syncwarp();
  rows_dot_rows<HD>(t.u, t.z, block);
  __syncwarp();
}

// dQ (and D): tiles 0 = Q, 1 = dO (this block's queries), 2 = K, 3 = V (the key tile).
template <int HD>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_dq_kernel(FlashParams f) {
#ifdef MOE_FLASH_SUPPORTED
  const AttentionArgs& a = f.a;
  const int dh = f.dh;
  const float scale = f.scale, inv_keep = f.inv_keep;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const DqSmem<HD> sm(smem_raw);
  const Where w(a, dh);
  const int qt = last_tiles_first();
  const int64_t q0 = int64_t{qt} * kTile, i = q0 + w.warp * 16 + w.r;
  const bf16* base = f.qkv + w.b * w.S * 3 * w.D + w.h * dh;
  load_tile<HD>(base, 3 * w.D, q0, w.S, dh, sm.tile(0));
  load_tile<HD>(f.d_out + w.b * w.S * w.D + w.h * dh, w.D, q0, w.S, dh, sm.tile(1));
  const float row_lse = i < w.S ? f.lse[w.bh * w.S + i] : 0.f;
  float* block = sm.f32(0, w.warp);
  const float* mine = block + w.r * kLdS + w.half * 32;
  bfloat* ds = sm.b16(0, w.warp) + w.r * kLdP + w.half * 32;
  const int rows_at = w.warp * 16 * (HD + 8);
  float d_i = 0.f;
  for (int pass = 0; pass < 2; ++pass) {  // pass 0: D_i; pass 1: dS and dQ
    FragC acc[HD / 16];
    for (int n = 0; n < HD / 16; ++n) wmma::fill_fragment(acc[n], 0.f);
    for (int kt = 0; kt <= qt; ++kt) {
      __syncthreads();
      load_tile<HD>(base + w.D, 3 * w.D, int64_t{kt} * kTile, w.S, dh, sm.tile(2));
      load_tile<HD>(base + 2 * w.D, 3 * w.D, int64_t{kt} * kTile, w.S, dh, sm.tile(3));
      __syncthreads();
      const int64_t j0 = int64_t{kt} * kTile + w.half * 32;
      const auto live = [&](int c) { return i < w.S && j0 + c <= i; };
      float pv[32];
      probabilities_then_dp<HD>(
          block, {sm.tile(0) + rows_at, sm.tile(2), sm.tile(1) + rows_at, sm.tile(3)}, mine, scale,
          live, [&](int) { return row_lse; }, pv);
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const float g = live(c) ? mine[c] * drop_scale(a, w.b, w.h, i, j0 + c, inv_keep) : 0.f;
        if (pass == 0) {
          d_i += pv[c] * g;
        } else {
          ds[c] = __float2bfloat16_rn(pv[c] * (g - d_i));
        }
      }
      __syncwarp();
      if (pass == 1) accumulate_product<HD>(sm.b16(0, w.warp), sm.tile(2), acc);
    }
    if (pass == 0) {
      d_i = pair_sum(d_i);
      if (i < w.S && w.half == 0) f.dsum[w.bh * w.S + i] = d_i;
    } else {
      __syncthreads();  // the K and V tiles become the staging
      store_rows<HD>(acc, sm.template stage<2>(w.warp), scale,
                     f.d_qkv + w.b * w.S * 3 * w.D + w.h * dh, 3 * w.D, q0 + w.warp * 16, w.S, dh);
    }
  }
#endif
}

// dK and dV: tiles 0 = K, 1 = V (this block's keys), 2 = Q, 3 = dO (the query tile); rows 0 and
// 1 hold the query tile's lse and D. A lane's row is a key j, its columns queries i.
template <int HD>
__global__ void __launch_bounds__(kFlashThreads) flash_backward_dkv_kernel(FlashParams f) {
#ifdef MOE_FLASH_SUPPORTED
  const AttentionArgs& a = f.a;
  const int dh = f.dh;
  const float scale = f.scale, inv_keep = f.inv_keep;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const DkvSmem<HD> sm(smem_raw);
  const Where w(a, dh);
  const int kt = first_tiles_first();
  const int tiles = static_cast<int>((w.S + kTile - 1) / kTile);
  const int64_t k0 = int64_t{kt} * kTile, j = k0 + w.warp * 16 + w.r;
  const bf16* base = f.qkv + w.b * w.S * 3 * w.D + w.h * dh;
  load_tile<HD>(base + w.D, 3 * w.D, k0, w.S, dh, sm.tile(0));
  load_tile<HD>(base + 2 * w.D, 3 * w.D, k0, w.S, dh, sm.tile(1));
  FragC dk[HD / 16], dv[HD / 16];
  for (int n = 0; n < HD / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.f);
    wmma::fill_fragment(dv[n], 0.f);
  }
  float* block = sm.f32(0, w.warp);
  const float* mine = block + w.r * kLdS + w.half * 32;
  bfloat* pt = sm.b16(0, w.warp) + w.r * kLdP + w.half * 32;
  bfloat* ds = sm.b16(1, w.warp) + w.r * kLdP + w.half * 32;
  const int rows_at = w.warp * 16 * (HD + 8);
  const float* lse_t = sm.row(0) + w.half * 32;
  const float* d_t = sm.row(1) + w.half * 32;
  for (int qt = kt; qt < tiles; ++qt) {
    const int64_t q0 = int64_t{qt} * kTile;
    __syncthreads();
    load_tile<HD>(base, 3 * w.D, q0, w.S, dh, sm.tile(2));
    load_tile<HD>(f.d_out + w.b * w.S * w.D + w.h * dh, w.D, q0, w.S, dh, sm.tile(3));
    for (int t = threadIdx.x; t < kTile; t += blockDim.x) {
      const bool in = q0 + t < w.S;
      sm.row(0)[t] = in ? f.lse[w.bh * w.S + q0 + t] : 0.f;
      sm.row(1)[t] = in ? f.dsum[w.bh * w.S + q0 + t] : 0.f;
    }
    __syncthreads();
    const int64_t i0 = q0 + w.half * 32;
    const auto live = [&](int c) { return i0 + c < w.S && j <= i0 + c; };
    float pv[32];
    probabilities_then_dp<HD>(
        block, {sm.tile(0) + rows_at, sm.tile(2), sm.tile(1) + rows_at, sm.tile(3)}, mine, scale,
        live, [&](int c) { return lse_t[c]; }, pv);
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const float m = live(c) ? drop_scale(a, w.b, w.h, i0 + c, j, inv_keep) : 0.f;
      pt[c] = __float2bfloat16_rn(pv[c] * m);
      ds[c] = __float2bfloat16_rn(pv[c] * (mine[c] * m - d_t[c]));
    }
    __syncwarp();
    accumulate_product<HD>(sm.b16(0, w.warp), sm.tile(3), dv);
    accumulate_product<HD>(sm.b16(1, w.warp), sm.tile(2), dk);
  }
  __syncthreads();  // the query tiles become the staging
  bf16* dst = f.d_qkv + w.b * w.S * 3 * w.D + w.h * dh;
  store_rows<HD>(dk, sm.template stage<2>(w.warp), scale, dst + w.D, 3 * w.D, k0 + w.warp * 16, w.S,
                 dh);
  store_rows<HD>(dv, sm.template stage<2>(w.warp), 1.f, dst + 2 * w.D, 3 * w.D, k0 + w.warp * 16,
                 w.S, dh);
#endif
}

// Launches kernel over (B*H, S / 64 tiles) with `bytes` of shared memory.
template <typename Kernel>
Status launch(Context& ctx, const char* op, Kernel kernel, size_t bytes, const FlashParams& f) {
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes));
  if (err != cudaSuccess) {
    return internal_error("cuda: ", op, ": cannot reserve ", bytes,
                          " bytes of shared memory: ", cudaGetErrorString(err));
  }
  const dim3 grid(static_cast<unsigned>(f.a.batch * f.a.heads),
                  static_cast<unsigned>((f.a.seq_len + kTile - 1) / kTile));
  kernel<<<grid, kFlashThreads, bytes, stream_of(ctx)>>>(f);
  return launch_status(op);
}

// Calls f(std::integral_constant<int, HD>) for the padded head width of dh.
template <typename Fn>
Status with_head_width(int64_t dh, Fn&& f) {
  if (dh <= 32) return f(std::integral_constant<int, 32>{});
  if (dh <= 64) return f(std::integral_constant<int, 64>{});
  return f(std::integral_constant<int, 128>{});
}

Status check_launchable(const char* op, const AttentionArgs& a, int64_t dh) {
  if (dh < 1 || dh > kFusedAttentionMaxHeadDim) {
    return invalid_argument_error(op, ": the fused kernels take heads of 1 to ",
                                  kFusedAttentionMaxHeadDim, " columns, got ", dh);
  }
  if (a.batch * a.heads > int64_t{0x7fffffff} || (a.seq_len + kTile - 1) / kTile > kMaxGridY) {
    return invalid_argument_error(op, ": ", a.batch, " x ", a.heads, " heads of ", a.seq_len,
                                  " positions exceed the fused kernels' grid");
  }
  return Status::OK();
}

// The parameters of a call, with the views' pointers (null where the stage has none).
FlashParams params_of(const AttentionArgs& a, int64_t dh) {
  FlashParams f{};
  f.a = a;
  f.dh = static_cast<int>(dh);
  f.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  f.inv_keep = static_cast<float>(1.0 / (1.0 - static_cast<double>(a.dropout)));
  return f;
}

}  // namespace

Status fused_attention_forward(Context& ctx, const AttentionArgs& a, const TensorView& qkv,
                               const TensorView& out, const TensorView& lse) {
  constexpr const char* kOp = "attention_forward (fused)";
  const int64_t dh = qkv.dim(1) / 3 / a.heads;
  MOE_RETURN_IF_ERROR(check_launchable(kOp, a, dh));
  FlashParams f = params_of(a, dh);
  f.qkv = qkv.data<bf16>();
  f.out = out.data<bf16>();
  f.lse = lse.data<float>();
  return with_head_width(dh, [&](auto hd) {
    constexpr int HD = decltype(hd)::value;
    return launch(ctx, kOp, flash_forward_kernel<HD>, ForwardSmem<HD>::kBytes, f);
  });
}

Status fused_attention_backward(Context& ctx, const AttentionArgs& a, const TensorView& d_out,
                                const TensorView& qkv, const TensorView& lse,
                                const TensorView& d_qkv) {
  constexpr const char* kOp = "attention_backward (fused)";
  const int64_t dh = qkv.dim(1) / 3 / a.heads;
  MOE_RETURN_IF_ERROR(check_launchable(kOp, a, dh));
  // D_i per row, from the dq kernel to the dkv kernel (stream order between them).
  MOE_ASSIGN_OR_RETURN(Tensor dsum, ctx.empty({a.batch, a.heads, a.seq_len}, DType::kF32));
  FlashParams f = params_of(a, dh);
  f.qkv = qkv.data<bf16>();
  f.d_out = d_out.data<bf16>();
  f.lse = lse.data<float>();
  f.dsum = dsum.data<float>();
  f.d_qkv = d_qkv.data<bf16>();
  return with_head_width(dh, [&](auto hd) -> Status {
    constexpr int HD = decltype(hd)::value;
    MOE_RETURN_IF_ERROR(launch(ctx, kOp, flash_backward_dq_kernel<HD>, DqSmem<HD>::kBytes, f));
    return launch(ctx, kOp, flash_backward_dkv_kernel<HD>, DkvSmem<HD>::kBytes, f);
  });
}

}  // namespace moe::kernels::cuda
