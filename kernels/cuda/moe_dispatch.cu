// The MoE layer's data movement on the GPU: the layout step (capacity slots in the CPU's stable
// order: all first choices in token order, then all second choices, ... decided by counting and
// an exclusive scan, never by atomics), its deduplication per destination rank (a flag per
// (rank, token), scanned per rank in token order), the row gathers, and the gate-weighted combine
// with its backward. Every accumulation runs in a fixed order, as on the CPU.
//
// Indices out of range (an expert >= E, a row >= N) cannot be reported without a sync: such an
// assignment is dropped and such a row reads as zeros (the router never produces them).
#include <cstdint>

#include "base/fast_divmod.h"
#include "kernels/common.h"
#include "kernels/cpu/chunked_sum.h"
#include "kernels/cpu/moe_dispatch_ref.h"  // CombineShape, LayoutBuffers
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/moe_dispatch.h"

namespace moe::kernels::cuda {
namespace {

constexpr int kChunk = 256;  // assignments per layout block

// Assignment a = j * T + t (the stable order). Block c handles assignments [c * 256, +256): each
// gets its rank among the chunk's earlier assignments to the same expert (rank[a]); the last
// assignment of each expert in the chunk writes the chunk's count for it (counts [chunks, E],
// zeroed before).
__global__ void layout_chunk_kernel(const int32_t* idx, int64_t tokens, int64_t k, int64_t experts,
                                    int32_t* rank, int64_t* counts) {
  __shared__ int32_t chunk_expert[kChunk];
  const int64_t total = tokens * k;
  const int64_t a = blockIdx.x * int64_t{kChunk} + threadIdx.x;
  int32_t e = -1;
  if (a < total) {
    const int64_t j = a / tokens, t = a % tokens;
    e = idx[t * k + j];
    if (e < 0 || e >= experts) e = -1;  // dropped (see the file comment)
  }
  chunk_expert[threadIdx.x] = e;
  __syncthreads();
  if (a >= total || e < 0) return;
  int32_t before = 0;
  for (int i = 0; i < static_cast<int>(threadIdx.x); ++i) before += chunk_expert[i] == e;
  bool last = true;
  for (int i = threadIdx.x + 1; i < kChunk; ++i) last &= chunk_expert[i] != e;
  rank[a] = before;
  if (last) counts[blockIdx.x * experts + e] = before + 1;
}

// One thread per expert: exclusive prefix over the chunks (in chunk order), the load, the kept
// count and the send-buffer block offsets (e * C, or filled by layout_offsets_kernel).
__global__ void layout_scan_kernel(int64_t* counts, int64_t chunks, int64_t experts,
                                   int64_t capacity, int64_t* load, int64_t* kept) {
  MOE_GRID_LOOP(e, experts) {
    int64_t running = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t n = counts[c * experts + e];
      counts[c * experts + e] = running;
      running += n;
    }
    load[e] = running;
    kept[e] = capacity < 0 ? running : (running < capacity ? running : capacity);
  }
}

// block[e] = e * C, or the exclusive prefix sum of the loads (dropless); one thread.
__global__ void layout_offsets_kernel(const int64_t* load, int64_t experts, int64_t capacity,
                                      int64_t* block) {
  int64_t running = 0;
  for (int64_t e = 0; e < experts; ++e) {
    block[e] = capacity >= 0 ? e * capacity : running;
    running += load[e];
  }
}

// What layout_rows_kernel reads (the earlier layout kernels' results).
struct LayoutRowsIn {
  const int32_t* idx;      // [T, K]: the expert of each assignment
  const int32_t* rank;     // [T * K]: rank among the chunk's earlier ones (layout_chunk_kernel)
  const int64_t* offsets;  // [chunks, E]: the chunk's first position (layout_scan_kernel)
  const int64_t* block;    // [E]: the expert's first send row (layout_offsets_kernel)
};

// Per token: slots, rows, the send buffer's token and key (out.slot, row, send_token, send_key;
// out.load, kept and drops are not touched), and the token's drops (drop_scratch[2t] = dropped
// assignments, [2t + 1] = 1 when all K were dropped).
__global__ void layout_rows_kernel(LayoutRowsIn in, int64_t tokens, int64_t k, LayoutArgs args,
                                   ref::LayoutBuffers out, double* drop_scratch) {
  MOE_GRID_LOOP(t, tokens) {
    int64_t token_drops = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t a = j * tokens + t;
      const int32_t e = in.idx[t * k + j];
      int64_t s = -1;
      if (e >= 0 && e < args.num_experts) {
        const int64_t position = in.offsets[(a / kChunk) * args.num_experts + e] + in.rank[a];
        s = (args.capacity < 0 || position < args.capacity) ? position : -1;
      }
      out.slot[t * k + j] = static_cast<int32_t>(s);
      if (s < 0) {
        out.row[t * k + j] = -1;
        ++token_drops;
        continue;
      }
      const int64_t r = in.block[e] + s;
      out.row[t * k + j] = static_cast<int32_t>(r);
      out.send_token[r] = static_cast<int32_t>(t);
      out.send_key[r] = (args.first_token() + t) * k + j;  // a device step is read here
    }
    drop_scratch[2 * t] = static_cast<double>(token_drops);
    drop_scratch[2 * t + 1] = token_drops == k ? 1.0 : 0.0;
  }
}

template <typename T>
__global__ void fill_kernel(T* p, int64_t n, T v) {
  MOE_GRID_LOOP(i, n) { p[i] = v; }
}

// The peer rank that assignment i = t * K + j is sent to, or -1: dropped (row -1), out of range
// (see the file comment), or bound for my own rank.
__device__ __forceinline__ int64_t dedup_peer(const int32_t* idx, const int32_t* row, int64_t i,
                                              const DedupArgs& a, int64_t send_rows) {
  const int32_t s = row[i], e = idx[i];
  if (s < 0 || s >= send_rows || e < 0 || e >= a.num_experts) return -1;
  const int64_t r = e / (a.num_experts / a.ranks);
  return r == a.rank ? -1 : r;
}

// Per token t: flags[r * T + t] = 1 for each peer rank r that one of t's kept assignments goes to
// (flags [R, T] zeroed before); pair_scratch[2t] = t's kept peer assignments, [2t + 1] = the
// distinct peer ranks among them (its unique rows).
__global__ void dedup_flags_kernel(const int32_t* idx, const int32_t* row, int64_t tokens,
                                   int64_t k, DedupArgs a, int64_t send_rows, int32_t* flags,
                                   double* pair_scratch) {
  MOE_GRID_LOOP(t, tokens) {
    int64_t assignments = 0, unique = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = dedup_peer(idx, row, t * k + j, a, send_rows);
      if (r < 0) continue;
      ++assignments;
      unique += flags[r * tokens + t] == 0;
      flags[r * tokens + t] = 1;
    }
    pair_scratch[2 * t] = static_cast<double>(assignments);
    pair_scratch[2 * t + 1] = static_cast<double>(unique);
  }
}

// One block per rank r (blockDim.x a multiple of 32): flags[r, :] becomes its exclusive prefix
// sum in place, tile by tile in token order (a warp-shuffle scan, then one over the warp totals):
// where t's flag was set, t's unique row within r's chunk. counts[r] = the flags' total.
__global__ void dedup_scan_kernel(int32_t* flags, int64_t tokens, int64_t* counts) {
  __shared__ int32_t warp_totals[32];
  int32_t* p = flags + blockIdx.x * tokens;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  int64_t running = 0;
  for (int64_t base = 0; base < tokens; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const int32_t v = i < tokens ? p[i] : 0;
    int32_t x = v;  // inclusive within the warp
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    if (lane == 31) warp_totals[warp] = x;
    __syncthreads();
    if (warp == 0) {  // inclusive over the warp totals
      int32_t w = lane < warps ? warp_totals[lane] : 0;
      for (int o = 1; o < 32; o <<= 1) {
        const int32_t y = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += y;
      }
      __syncwarp();
      if (lane < warps) warp_totals[lane] = w;
    }
    __syncthreads();
    const int32_t before = warp > 0 ? warp_totals[warp - 1] : 0;
    if (i < tokens) p[i] = static_cast<int32_t>(running + before + x - v);
    running += warp_totals[warps - 1];
    __syncthreads();  // the next tile rewrites warp_totals
  }
  if (threadIdx.x == 0) counts[blockIdx.x] = running;
}

// chunk[r] = the exclusive prefix sum of counts [R]: where rank r's unique rows start; one thread.
__global__ void dedup_chunks_kernel(const int64_t* counts, int64_t ranks, int64_t* chunk) {
  int64_t running = 0;
  for (int64_t r = 0; r < ranks; ++r) {
    chunk[r] = running;
    running += counts[r];
  }
}

// Per token t: each kept peer assignment's send row gets t's unique row within its rank's chunk
// (position [R, T], the scanned flags), and the first assignment to each peer rank writes t as
// that unique row's source token.
struct DedupEmit {
  const int32_t* position;  // [R, T] the scanned flags: t's unique row within rank r's chunk
  const int64_t* chunk;     // [R] where rank r's unique rows start
  int32_t* uniq_token;      // [out] the source token of each unique row
  int32_t* send_uniq;       // [out] each send row's unique row within its rank's chunk
};
__global__ void dedup_emit_kernel(const int32_t* idx, const int32_t* row, int64_t tokens, int64_t k,
                                  DedupArgs a, int64_t send_rows, DedupEmit e) {
  const int32_t* position = e.position;
  const int64_t* chunk = e.chunk;
  int32_t *uniq_token = e.uniq_token, *send_uniq = e.send_uniq;
  MOE_GRID_LOOP(t, tokens) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = dedup_peer(idx, row, t * k + j, a, send_rows);
      if (r < 0) continue;
      const int32_t p = position[r * tokens + t];
      send_uniq[row[t * k + j]] = p;
      bool first = true;
      for (int64_t i = 0; i < j; ++i) first &= dedup_peer(idx, row, t * k + i, a, send_rows) != r;
      if (first) uniq_token[chunk[r] + p] = static_cast<int32_t>(t);
    }
  }
}

__global__ void block_fill_counts_kernel(const int64_t* keys, int64_t blocks, int64_t c,
                                         int32_t* filled) {
  MOE_GRID_LOOP(b, blocks) {
    int32_t n = 0;
    for (int64_t i = 0; i < c; ++i) n += keys[b * c + i] >= 0;
    filled[b] = n;
  }
}

// Row copies in 16- or 4-byte words when the rows' size and alignment allow it, else bytes.
template <typename W>
__global__ void gather_rows_kernel(const W* src, int64_t n_src, const int32_t* index, int64_t m,
                                   FastDivmod words, W* dst) {
  const int64_t n = words.divisor();
  MOE_GRID_LOOP(i, m * n) {
    int64_t r, w;
    words.divmod(i, &r, &w);
    const int32_t s = index[r];
    dst[i] = (s < 0 || s >= n_src) ? W{} : src[static_cast<int64_t>(s) * n + w];
  }
}

template <typename A>
__global__ void gather_sum_rows_kernel(const A* src, int64_t n_src, const int32_t* rows,
                                       int64_t tokens, int64_t k, FastDivmod by_d, A* dst) {
  using C = accum_t<A>;
  const int64_t d = by_d.divisor();
  MOE_GRID_LOOP(i, tokens * d) {
    int64_t t, q;
    by_d.divmod(i, &t, &q);
    C acc = C(0);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = rows[t * k + j];
      if (r < 0 || r >= n_src) continue;
      acc += load(src, static_cast<int64_t>(r) * d + q);
    }
    store(dst, i, acc);
  }
}

template <typename A, typename F>
__global__ void combine_kernel(const A* y, const int32_t* row, const F* gate, const F* omega,
                               ref::CombineShape shape, FastDivmod by_d, A* u) {
  using C = accum_t<A>;
  const int64_t tokens = shape.tokens, k = shape.k, d = shape.d, y_rows = shape.y_rows;
  MOE_GRID_LOOP(i, tokens * d) {
    int64_t t, q;
    by_d.divmod(i, &t, &q);
    C acc = C(0);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t rr = row[t * k + j];
      if (rr < 0 || rr >= y_rows) continue;
      const C gj = static_cast<C>(gate[t * k + j]);
      const C s = load(y, static_cast<int64_t>(rr) * d + q);
      acc += omega != nullptr ? gj * (static_cast<C>(omega[q]) * s) : gj * s;
    }
    store(u, i, acc);
  }
}

// dy rows of referenced slots (every row is referenced at most once; dy was zeroed).
template <typename A, typename F>
__global__ void combine_dy_kernel(const A* du, const int32_t* row, const F* gate, const F* omega,
                                  ref::CombineShape shape, FastDivmod by_d, FastDivmod by_k,
                                  A* dy) {
  using C = accum_t<A>;
  const int64_t tokens = shape.tokens, k = shape.k, d = shape.d, y_rows = shape.y_rows;
  MOE_GRID_LOOP(i, tokens * k * d) {
    int64_t tj, q;
    by_d.divmod(i, &tj, &q);
    const int64_t t = by_k.div(tj);
    const int32_t rr = row[tj];
    if (rr < 0 || rr >= y_rows) continue;
    const C wq = omega != nullptr ? static_cast<C>(omega[q]) : C(1);
    store(dy, static_cast<int64_t>(rr) * d + q,
          static_cast<C>(gate[tj]) * wq * load(du, t * d + q));
  }
}

// d_gate[t, j] = <du[t], omega ⊙ y[row]> in double: one warp per (t, j), fixed shuffle tree.
template <typename A, typename F>
__global__ void combine_dgate_kernel(const A* du, const A* y, const int32_t* row, const F* omega,
                                     ref::CombineShape shape, F* d_gate) {
  const int64_t tokens = shape.tokens, k = shape.k, d = shape.d, y_rows = shape.y_rows;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  const int lane = threadIdx.x & 31;
  for (int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; warp < tokens * k;
       warp += warps) {
    const int64_t t = warp / k;
    const int32_t rr = row[warp];
    double dot = 0;
    if (rr >= 0 && rr < y_rows) {
      for (int64_t q = lane; q < d; q += 32) {
        const double wq = omega != nullptr ? static_cast<double>(omega[q]) : 1.0;
        dot += static_cast<double>(load(du, t * d + q)) *
               (wq * static_cast<double>(load(y, static_cast<int64_t>(rr) * d + q)));
      }
    }
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_down_sync(0xffffffffu, dot, o);
    if (lane == 0) d_gate[warp] = static_cast<F>(dot);
  }
}

// Level 1 of d_omega's chunked sum (kernels/cpu/chunked_sum.h): thread (r, q) adds run r's
// kSumChunk slots of column q, in order, each term gate * y[row] * du rounded to F;
// partial[q * runs + r] (rows of runs per column, for chunked_row_sums).
template <typename A, typename F>
__global__ void combine_domega_runs_kernel(const A* du, const A* y, const int32_t* row,
                                           const F* gate, ref::CombineShape shape, int64_t runs,
                                           double* partial) {
  using C = accum_t<A>;
  const int64_t slots = shape.tokens * shape.k, d = shape.d;
  MOE_GRID_LOOP(i, runs * d) {
    const int64_t r = i / d, q = i % d;
    const int64_t begin = r * ref::kSumChunk;
    const int64_t end = slots - begin < ref::kSumChunk ? slots : begin + ref::kSumChunk;
    double s = 0;
    for (int64_t tj = begin; tj < end; ++tj) {
      const int32_t rr = row[tj];
      if (rr < 0 || rr >= shape.y_rows) continue;
      const C gj = static_cast<C>(gate[tj]);
      s += static_cast<double>(static_cast<F>(gj * load(y, static_cast<int64_t>(rr) * d + q) *
                                              load(du, (tj / shape.k) * d + q)));
    }
    partial[q * runs + r] = s;
  }
}

template <typename F>
__global__ void add_totals_kernel(const double* totals, int64_t d, F* d_omega) {
  MOE_GRID_LOOP(q, d) { d_omega[q] = static_cast<F>(static_cast<double>(d_omega[q]) + totals[q]); }
}

}  // namespace

Status moe_layout(Context& ctx, const LayoutArgs& a, const TensorView& idx, const LayoutOut& out) {
  const TensorView &slot = out.slot, &row = out.row, &load = out.load, &kept = out.kept;
  const TensorView &send_token = out.send_token, &send_key = out.send_key, &drops = out.drops;
  const int64_t tokens = idx.dim(0), k = idx.dim(1), experts = a.num_experts;
  const int64_t send_rows = a.capacity >= 0 ? experts * a.capacity : tokens * k;
  const int64_t chunks = std::max<int64_t>(1, (tokens * k + kChunk - 1) / kChunk);
  cudaStream_t s = stream_of(ctx);
  MOE_ASSIGN_OR_RETURN(Tensor counts, ctx.zeros({chunks, experts}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(Tensor rank, ctx.empty({std::max<int64_t>(1, tokens * k)}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(Tensor block, ctx.empty({experts}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(Tensor scratch, ctx.empty({std::max<int64_t>(1, tokens), 2}, DType::kF64));
  if (tokens * k > 0) {
    layout_chunk_kernel<<<static_cast<unsigned>(chunks), kChunk, 0, s>>>(
        idx.data<int32_t>(), tokens, k, experts, rank.data<int32_t>(), counts.data<int64_t>());
  }
  layout_scan_kernel<<<grid_for(experts), kThreads, 0, s>>>(counts.data<int64_t>(), chunks, experts,
                                                            a.capacity, load.data<int64_t>(),
                                                            kept.data<int64_t>());
  layout_offsets_kernel<<<1, 1, 0, s>>>(load.data<int64_t>(), experts, a.capacity,
                                        block.data<int64_t>());
  if (send_rows > 0) {
    fill_kernel<int32_t>
        <<<grid_for(send_rows), kThreads, 0, s>>>(send_token.data<int32_t>(), send_rows, -1);
    fill_kernel<int64_t>
        <<<grid_for(send_rows), kThreads, 0, s>>>(send_key.data<int64_t>(), send_rows, -1);
  }
  if (tokens > 0) {
    LayoutRowsIn in;
    in.idx = idx.data<int32_t>();
    in.rank = rank.data<int32_t>();
    in.offsets = counts.data<int64_t>();
    in.block = block.data<int64_t>();
    ref::LayoutBuffers rows_out;
    rows_out.slot = slot.data<int32_t>();
    rows_out.row = row.data<int32_t>();
    rows_out.send_token = send_token.data<int32_t>();
    rows_out.send_key = send_key.data<int64_t>();
    layout_rows_kernel<<<grid_for(tokens), kThreads, 0, s>>>(in, tokens, k, a, rows_out,
                                                             scratch.data<double>());
    if (drops.numel() > 0) {
      add_pair_sums_kernel<<<1, kThreads, 0, s>>>(scratch.data<double>(), tokens,
                                                  drops.data<double>());
    }
  }
  return launch_status("moe_layout");
}

Status moe_dedup_layout(Context& ctx, const DedupArgs& a, const TensorView& idx,
                        const TensorView& row, const DedupOut& out) {
  const int64_t tokens = idx.dim(0), k = idx.dim(1), ranks = a.ranks;
  const int64_t send_rows = a.capacity >= 0 ? a.num_experts * a.capacity : tokens * k;
  const int64_t unique_rows = out.uniq_token.numel();
  cudaStream_t s = stream_of(ctx);
  MOE_ASSIGN_OR_RETURN(Tensor position,
                       ctx.zeros({std::max<int64_t>(1, ranks * tokens)}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(Tensor chunk, ctx.empty({ranks}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(Tensor scratch, ctx.empty({std::max<int64_t>(1, tokens), 2}, DType::kF64));
  if (send_rows > 0) {
    fill_kernel<int32_t>
        <<<grid_for(send_rows), kThreads, 0, s>>>(out.send_uniq.data<int32_t>(), send_rows, -1);
  }
  if (unique_rows > 0) {
    fill_kernel<int32_t><<<grid_for(unique_rows), kThreads, 0, s>>>(out.uniq_token.data<int32_t>(),
                                                                    unique_rows, -1);
  }
  if (tokens > 0) {
    dedup_flags_kernel<<<grid_for(tokens), kThreads, 0, s>>>(
        idx.data<int32_t>(), row.data<int32_t>(), tokens, k, a, send_rows, position.data<int32_t>(),
        scratch.data<double>());
  }
  dedup_scan_kernel<<<static_cast<unsigned>(ranks), kThreads, 0, s>>>(
      position.data<int32_t>(), tokens, out.uniq_counts.data<int64_t>());
  dedup_chunks_kernel<<<1, 1, 0, s>>>(out.uniq_counts.data<int64_t>(), ranks,
                                      chunk.data<int64_t>());
  if (tokens > 0) {
    dedup_emit_kernel<<<grid_for(tokens), kThreads, 0, s>>>(
        idx.data<int32_t>(), row.data<int32_t>(), tokens, k, a, send_rows,
        DedupEmit{position.data<int32_t>(), chunk.data<int64_t>(), out.uniq_token.data<int32_t>(),
                  out.send_uniq.data<int32_t>()});
    if (out.stats.numel() > 0) {
      add_pair_sums_kernel<<<1, kThreads, 0, s>>>(scratch.data<double>(), tokens,
                                                  out.stats.data<double>());
    }
  }
  return launch_status("moe_dedup_layout");
}

Status block_fill_counts(Context& ctx, const TensorView& keys, const TensorView& filled) {
  const int64_t blocks = keys.dim(0);
  if (blocks == 0) return Status::OK();
  block_fill_counts_kernel<<<grid_for(blocks), kThreads, 0, stream_of(ctx)>>>(
      keys.data<int64_t>(), blocks, keys.dim(1), filled.data<int32_t>());
  return launch_status("block_fill_counts");
}

Status gather_rows(Context& ctx, const TensorView& src, const TensorView& index,
                   const TensorView& dst) {
  const int64_t m = dst.dim(0);
  const int64_t row_bytes = src.dim(1) * static_cast<int64_t>(dtype_size(src.dtype()));
  if (m == 0 || row_bytes == 0) return Status::OK();
  // Words of `bytes` when every row of both starts on such a boundary (a bf16 view may begin at
  // an odd element).
  const auto on = [&](uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(src.raw()) % bytes == 0 &&
           reinterpret_cast<uintptr_t>(dst.raw()) % bytes == 0 && row_bytes % bytes == 0;
  };
  if (on(16)) {
    const int64_t words = row_bytes / 16;
    gather_rows_kernel<uint4><<<grid_for(m * words), kThreads, 0, stream_of(ctx)>>>(
        static_cast<const uint4*>(src.raw()), src.dim(0), index.data<int32_t>(), m,
        FastDivmod(words), static_cast<uint4*>(dst.raw()));
  } else if (on(4)) {
    const int64_t words = row_bytes / 4;
    gather_rows_kernel<uint32_t><<<grid_for(m * words), kThreads, 0, stream_of(ctx)>>>(
        static_cast<const uint32_t*>(src.raw()), src.dim(0), index.data<int32_t>(), m,
        FastDivmod(words), static_cast<uint32_t*>(dst.raw()));
  } else {
    gather_rows_kernel<uint8_t><<<grid_for(m * row_bytes), kThreads, 0, stream_of(ctx)>>>(
        static_cast<const uint8_t*>(src.raw()), src.dim(0), index.data<int32_t>(), m,
        FastDivmod(row_bytes), static_cast<uint8_t*>(dst.raw()));
  }
  return launch_status("gather_rows");
}

Status gather_sum_rows(Context& ctx, const TensorView& src, const TensorView& rows,
                       const TensorView& dst) {
  const int64_t tokens = dst.dim(0), d = dst.dim(1);
  if (tokens * d == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("gather_sum_rows", src, [&](auto tag) {
    using A = decltype(tag);
    gather_sum_rows_kernel<A><<<grid_for(tokens * d), kThreads, 0, stream_of(ctx)>>>(
        src.data<A>(), src.dim(0), rows.data<int32_t>(), tokens, rows.dim(1), FastDivmod(d),
        dst.data<A>());
  }));
  return launch_status("gather_sum_rows");
}

Status combine(Context& ctx, const TensorView& y, const TensorView& row, const TensorView& gate,
               const TensorView& omega, const TensorView& u) {
  const int64_t tokens = u.dim(0), d = u.dim(1);
  if (tokens * d == 0) return Status::OK();
  ref::CombineShape shape;
  shape.tokens = tokens;
  shape.k = row.dim(1);
  shape.d = d;
  shape.y_rows = y.dim(0);
  MOE_RETURN_IF_ERROR(dispatch_act("combine", y, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    combine_kernel<A, F><<<grid_for(tokens * d), kThreads, 0, stream_of(ctx)>>>(
        y.data<A>(), row.data<int32_t>(), gate.data<F>(), data_or_null<F>(omega), shape,
        FastDivmod(d), u.data<A>());
  }));
  return launch_status("combine");
}

namespace {

// d_omega += the chunked sum of each column's slot terms: runs in parallel, then the levels.
template <typename A, typename F>
Status combine_domega(Context& ctx, const TensorView& du, const TensorView& y,
                      const TensorView& row, const TensorView& gate, const ref::CombineShape& shape,
                      const TensorView& d_omega) {
  const int64_t d = shape.d, runs = ref::sum_runs(shape.tokens * shape.k);
  MOE_ASSIGN_OR_RETURN(Tensor partial, ctx.empty({runs * d}, DType::kF64));
  MOE_ASSIGN_OR_RETURN(Tensor totals, ctx.empty({d}, DType::kF64));
  cudaStream_t s = stream_of(ctx);
  combine_domega_runs_kernel<A, F>
      <<<grid_for(runs * d), kThreads, 0, s>>>(du.data<A>(), y.data<A>(), row.data<int32_t>(),
                                               gate.data<F>(), shape, runs, partial.data<double>());
  MOE_RETURN_IF_ERROR(launch_status("combine_backward (d_omega)"));
  MOE_RETURN_IF_ERROR(
      chunked_row_sums(ctx, partial.data<double>(), d, runs, totals.data<double>()));
  add_totals_kernel<F>
      <<<grid_for(d), kThreads, 0, s>>>(totals.data<double>(), d, d_omega.data<F>());
  return launch_status("combine_backward (d_omega)");
}

}  // namespace

Status combine_backward(Context& ctx, const TensorView& du, const TensorView& y,
                        const TensorView& row, const TensorView& gate, const TensorView& omega,
                        const CombineGrads& grads) {
  const TensorView &dy = grads.dy, &d_gate = grads.d_gate, &d_omega = grads.d_omega;
  const int64_t tokens = du.dim(0), d = du.dim(1), k = row.dim(1), y_rows = y.dim(0);
  MOE_RETURN_IF_ERROR(ctx.zero(dy));
  if (tokens * k == 0) return Status::OK();
  const bool with_omega = omega.numel() > 0 && d_omega.numel() > 0;
  ref::CombineShape shape;
  shape.tokens = tokens;
  shape.k = k;
  shape.d = d;
  shape.y_rows = y_rows;
  cudaStream_t s = stream_of(ctx);
  Status launched = Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("combine_backward", y, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const F* w = data_or_null<F>(omega);
    if (d > 0) {
      combine_dy_kernel<A, F><<<grid_for(tokens * k * d), kThreads, 0, s>>>(
          du.data<A>(), row.data<int32_t>(), gate.data<F>(), w, shape, FastDivmod(d), FastDivmod(k),
          dy.data<A>());
    }
    combine_dgate_kernel<A, F><<<grid_for(tokens * k * 32), kThreads, 0, s>>>(
        du.data<A>(), y.data<A>(), row.data<int32_t>(), w, shape, d_gate.data<F>());
    if (with_omega && d > 0) launched = combine_domega<A, F>(ctx, du, y, row, gate, shape, d_omega);
  }));
  MOE_RETURN_IF_ERROR(launched);
  return launch_status("combine_backward");
}

}  // namespace moe::kernels::cuda
