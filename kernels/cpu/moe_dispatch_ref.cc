#include "kernels/cpu/moe_dispatch_ref.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"
#include "kernels/cpu/chunked_sum.h"
#include "kernels/cpu/row_copy.h"

namespace moe::kernels::ref {

void assign_capacity(const int32_t* idx, int64_t tokens, int64_t k, int64_t experts,
                     int64_t capacity, int32_t* slot, int64_t* load, int64_t* kept) {
  std::fill(load, load + experts, 0);
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t e = idx[t * k + j];
      const int64_t position = load[e]++;
      slot[t * k + j] = (capacity < 0 || position < capacity) ? static_cast<int32_t>(position) : -1;
    }
  }
  for (int64_t e = 0; e < experts; ++e)
    kept[e] = capacity < 0 ? load[e] : std::min(load[e], capacity);
}

void moe_layout(const LayoutArgs& a, const int32_t* idx, int64_t tokens, int64_t k,
                const LayoutBuffers& out) {
  const int64_t experts = a.num_experts;
  const int64_t send_rows = a.capacity >= 0 ? experts * a.capacity : tokens * k;
  int32_t* pslot = out.slot;
  int64_t* pload = out.load;
  assign_capacity(idx, tokens, k, experts, a.capacity, pslot, pload, out.kept);
  // Block offsets of the send buffer: e * C, or the exclusive prefix sum of the loads.
  std::vector<int64_t> block(experts + 1, 0);
  for (int64_t e = 0; e < experts; ++e) {
    block[e + 1] = block[e] + (a.capacity >= 0 ? a.capacity : pload[e]);
  }
  int32_t* prow = out.row;
  int32_t* ptoken = out.send_token;
  int64_t* pkey = out.send_key;
  std::fill_n(ptoken, send_rows, -1);
  std::fill_n(pkey, send_rows, -1);
  int64_t dropped = 0, fully_dropped = 0;
  const int64_t first = a.first_token();  // a step in device memory is host memory here
  for (int64_t t = 0; t < tokens; ++t) {
    int64_t token_drops = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t s = pslot[t * k + j];
      if (s < 0) {
        prow[t * k + j] = -1;
        ++token_drops;
        continue;
      }
      const int64_t r = block[idx[t * k + j]] + s;
      prow[t * k + j] = static_cast<int32_t>(r);
      ptoken[r] = static_cast<int32_t>(t);
      pkey[r] = (first + t) * k + j;
    }
    dropped += token_drops;
    fully_dropped += token_drops == k;
  }
  if (out.drops != nullptr) {
    out.drops[0] += static_cast<double>(dropped);
    out.drops[1] += static_cast<double>(fully_dropped);
  }
}

void moe_dedup_layout(const DedupArgs& a, const int32_t* idx, const int32_t* row, int64_t tokens,
                      int64_t k, const DedupBuffers& out) {
  const int64_t ranks = a.ranks, local = a.num_experts / a.ranks;
  const int64_t send_rows = a.capacity >= 0 ? a.num_experts * a.capacity : tokens * k;
  std::fill_n(out.send_uniq, send_rows, -1);
  std::fill_n(out.uniq_token, tokens * std::min(k, ranks - 1), -1);
  std::fill_n(out.uniq_counts, ranks, 0);
  // position[t * R + r]: token t's unique row within rank r's chunk, or -1. Tokens run in order,
  // so each chunk is in token order.
  std::vector<int32_t> position(static_cast<size_t>(tokens * ranks), -1);
  int64_t peer_rows = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t s = row[t * k + j];
      const int64_t r = idx[t * k + j] / local;
      if (s < 0 || r == a.rank) continue;
      ++peer_rows;
      int32_t& p = position[t * ranks + r];
      if (p < 0) p = static_cast<int32_t>(out.uniq_counts[r]++);
      out.send_uniq[s] = p;
    }
  }
  std::vector<int64_t> chunk(ranks + 1, 0);  // exclusive prefix sums of the counts
  for (int64_t r = 0; r < ranks; ++r) chunk[r + 1] = chunk[r] + out.uniq_counts[r];
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t r = 0; r < ranks; ++r) {
      const int32_t p = position[t * ranks + r];
      if (p >= 0) out.uniq_token[chunk[r] + p] = static_cast<int32_t>(t);
    }
  }
  if (out.stats != nullptr) {
    out.stats[0] += static_cast<double>(peer_rows);
    out.stats[1] += static_cast<double>(chunk[ranks]);
  }
}

void block_fill_counts(const int64_t* keys, int64_t blocks, int64_t c, int32_t* filled) {
  for (int64_t b = 0; b < blocks; ++b) {
    int32_t n = 0;
    for (int64_t i = 0; i < c; ++i) n += keys[b * c + i] >= 0;
    filled[b] = n;
  }
}

void gather_rows(const void* src, const int32_t* index, int64_t rows, int64_t cols,
                 size_t elem_size, void* dst) {
  const size_t row_bytes = static_cast<size_t>(cols) * elem_size;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  const int32_t* idx = index;
  const bool streaming = use_streaming_stores(d, row_bytes, static_cast<size_t>(rows) * row_bytes);
  parallel_for(rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    if (streaming) {
      for (int64_t i = begin; i < end; ++i) {
        stream_row(d + i * row_bytes, idx[i] < 0 ? nullptr : s + idx[i] * row_bytes, row_bytes);
      }
      stream_fence();
      return;
    }
    for (int64_t i = begin; i < end; ++i) {
      if (idx[i] < 0) {
        std::memset(d + i * row_bytes, 0, row_bytes);
      } else {
        std::memcpy(d + i * row_bytes, s + idx[i] * row_bytes, row_bytes);
      }
    }
  });
}

template <typename A, typename F>
void combine(const A* y, const int32_t* row, const F* gate, const F* omega, int64_t tokens,
             int64_t k, int64_t d, A* u) {
  using C = accum_t<A>;
  parallel_for(tokens, row_grain(k * d), [&](int64_t t0, int64_t t1) {
    std::vector<C> acc(std::is_same_v<A, C> ? 0 : d);
    for (int64_t t = t0; t < t1; ++t) {
      C* out;
      if constexpr (std::is_same_v<A, C>) {
        out = u + t * d;
      } else {
        out = acc.data();
      }
      for (int64_t q = 0; q < d; ++q) out[q] = C(0);
      for (int64_t j = 0; j < k; ++j) {
        const int32_t rr = row[t * k + j];
        if (rr < 0) continue;
        const C gj = static_cast<C>(gate[t * k + j]);
        const A* src = y + static_cast<int64_t>(rr) * d;
        if (omega != nullptr) {
          for (int64_t q = 0; q < d; ++q)
            out[q] += gj * (static_cast<C>(omega[q]) * static_cast<C>(src[q]));
        } else {
          for (int64_t q = 0; q < d; ++q) out[q] += gj * static_cast<C>(src[q]);
        }
      }
      if constexpr (!std::is_same_v<A, C>) {
        for (int64_t q = 0; q < d; ++q) u[t * d + q] = static_cast<A>(out[q]);
      }
    }
  });
}

// One routed row of combine_backward: dst[q] = gj w_q du_q, and returns the gate's gradient
// sum_q du_q (w_q y_q) (w = 1 without omega), accumulated in double in eight interleaved partial
// sums (lane q % 8) added pairwise at the end: independent chains the compiler vectorises, and
// the same bits at any thread count.
template <bool kOmega, typename A, typename F, typename C>
double scale_and_dot(const A* du, const A* y, const F* omega, C gj, int64_t d, A* dst) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const auto one = [&](int64_t q, int i) {
    const C wq = kOmega ? static_cast<C>(omega[q]) : C(1);
    const C g = static_cast<C>(du[q]);
    dst[q] = static_cast<A>(gj * wq * g);
    lane[i] += static_cast<double>(g) * (wq * static_cast<C>(y[q]));
  };
  int64_t q = 0;
  for (; q + 8 <= d; q += 8) {
    for (int i = 0; i < 8; ++i) one(q + i, i);
  }
  for (int i = 0; q < d; ++q, ++i) one(q, i);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

template <typename A, typename F>
void combine_backward(const A* du, const A* y, const int32_t* row, const F* gate, const F* omega,
                      const CombineShape& shape, const CombineBackwardOut<A, F>& out) {
  using C = accum_t<A>;
  const int64_t tokens = shape.tokens, k = shape.k, d = shape.d, y_rows = shape.y_rows;
  A* dy = out.dy;
  F* d_gate = out.d_gate;
  F* d_omega = out.d_omega;
  parallel_for(y_rows * d, kElementGrain,
               [&](int64_t begin, int64_t end) { std::fill(dy + begin, dy + end, A(0)); });
  // Every routed (t, j) owns its row of dy, so tokens run in parallel.
  parallel_for(tokens, row_grain(2 * k * d), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const A* dut = du + t * d;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t rr = row[t * k + j];
        if (rr < 0) {
          d_gate[t * k + j] = F(0);
          continue;
        }
        const C gj = static_cast<C>(gate[t * k + j]);
        const A* src = y + static_cast<int64_t>(rr) * d;
        A* dst = dy + static_cast<int64_t>(rr) * d;
        const double dot = omega != nullptr ? scale_and_dot<true>(dut, src, omega, gj, d, dst)
                                            : scale_and_dot<false>(dut, src, omega, gj, d, dst);
        d_gate[t * k + j] = static_cast<F>(dot);
      }
    }
  });
  if (d_omega == nullptr || tokens * k == 0) return;  // no slots: d_omega as it was (the GPU too)
  // d_omega[q] += the sum over the slots (t, j), in token order, of gate * y[row] * du (each term
  // rounded to F), added in chunked_sum.h's order: runs of kSumChunk slots, then the runs' sums
  // (a GPU sums the runs in parallel). Dropped slots add nothing. Columns in parallel.
  const int64_t slots = tokens * k, runs = sum_runs(slots);
  constexpr int64_t kCols = 32;
  parallel_for((d + kCols - 1) / kCols, 1, [&](int64_t c0, int64_t c1) {
    std::vector<double> level(static_cast<size_t>(kCols * runs)), run(kCols);
    std::vector<double> scratch(static_cast<size_t>(sum_runs(runs)) + 1);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t q0 = c * kCols, q1 = std::min(d, q0 + kCols);
      for (int64_t r = 0; r < runs; ++r) {
        std::fill(run.begin(), run.end(), 0.0);
        for (int64_t tj = r * kSumChunk; tj < std::min(slots, (r + 1) * kSumChunk); ++tj) {
          const int32_t rr = row[tj];
          if (rr < 0) continue;
          const C gj = static_cast<C>(gate[tj]);
          const A* src = y + static_cast<int64_t>(rr) * d;
          const A* dut = du + (tj / k) * d;
          for (int64_t q = q0; q < q1; ++q) {
            run[q - q0] += static_cast<double>(
                static_cast<F>(gj * static_cast<C>(src[q]) * static_cast<C>(dut[q])));
          }
        }
        for (int64_t q = q0; q < q1; ++q) level[(q - q0) * runs + r] = run[q - q0];
      }
      for (int64_t q = q0; q < q1; ++q) {
        const double sum = chunked_sum(level.data() + (q - q0) * runs, runs, scratch.data());
        d_omega[q] = static_cast<F>(static_cast<double>(d_omega[q]) + sum);
      }
    }
  });
}

template <typename A>
void gather_sum_rows(const A* src, const int32_t* rows, int64_t tokens, int64_t k, int64_t d,
                     A* dst) {
  using C = accum_t<A>;
  parallel_for(tokens, row_grain(k * d), [&](int64_t t0, int64_t t1) {
    std::vector<C> acc(d);
    for (int64_t t = t0; t < t1; ++t) {
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t j = 0; j < k; ++j) {
        const int32_t r = rows[t * k + j];
        if (r < 0) continue;
        const A* s = src + static_cast<int64_t>(r) * d;
        for (int64_t q = 0; q < d; ++q) acc[q] += static_cast<C>(s[q]);
      }
      for (int64_t q = 0; q < d; ++q) dst[t * d + q] = static_cast<A>(acc[q]);
    }
  });
}

#define MOE_INSTANTIATE_DISPATCH(A, F)                                                         \
  template void combine<A, F>(const A*, const int32_t*, const F*, const F*, int64_t, int64_t,  \
                              int64_t, A*);                                                    \
  template void combine_backward<A, F>(const A*, const A*, const int32_t*, const F*, const F*, \
                                       const CombineShape&, const CombineBackwardOut<A, F>&);  \
  template void gather_sum_rows<A>(const A*, const int32_t*, int64_t, int64_t, int64_t, A*);
MOE_INSTANTIATE_DISPATCH(float, float)
MOE_INSTANTIATE_DISPATCH(double, double)
MOE_INSTANTIATE_DISPATCH(bf16, float)
#undef MOE_INSTANTIATE_DISPATCH

}  // namespace moe::kernels::ref
