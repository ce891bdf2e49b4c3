// Embedding lookup and its deterministic backward on the GPU. The backward adds each element's
// rows in token order, the reference's order, so the gradients match the CPU bit for bit in f32
// and f64: the table's rows through the tokens grouped by id (a stable sort, key_runs.h), one
// thread per (id, column) walking that id's tokens; the positions' rows one thread per
// (position, column) walking the sequences.
#include "base/fast_divmod.h"
#include "kernels/common.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/key_runs.h"

namespace moe::kernels::cuda {
namespace {

template <typename W, typename A, typename F>
__global__ void embedding_forward_kernel(const int32_t* ids, int64_t n, const W* table, int64_t v,
                                         const F* pos, FastDivmod by_s, FastDivmod by_d, A* out) {
  const int64_t d = by_d.divisor();
  MOE_GRID_LOOP(i, n * d) {
    int64_t r, j;
    by_d.divmod(i, &r, &j);
    const int32_t id = ids[r];
    if (id < 0 || id >= v) {
      store(out, i, F(0));
    } else if (pos == nullptr) {
      store(out, i, load(table, static_cast<int64_t>(id) * d + j));
    } else {
      store(out, i,
            static_cast<F>(load(table, static_cast<int64_t>(id) * d + j)) +
                pos[(r - by_s.div(r) * by_s.divisor()) * d + j]);
    }
  }
}

// Thread (i, q) for sorted position i that starts a run of equal ids: that id's rows of column q,
// in token order (runs keep it), added to its table row. Other threads have nothing to do.
template <typename A, typename F>
__global__ void embedding_table_grad_kernel(const int32_t* key, const int32_t* row, int64_t n,
                                            int64_t v, const A* d_out, FastDivmod by_d,
                                            F* d_table) {
  const int64_t d = by_d.divisor();
  MOE_GRID_LOOP(i, n * d) {
    int64_t first, q;
    by_d.divmod(i, &first, &q);
    const int32_t id = key[first];
    if ((first > 0 && key[first - 1] == id) || id < 0 || id >= v) continue;
    F* dst = d_table + static_cast<int64_t>(id) * d + q;
    F acc = *dst;
    for (int64_t r = first; r < n && key[r] == id; ++r) {
      acc += static_cast<F>(load(d_out, static_cast<int64_t>(row[r]) * d + q));
    }
    *dst = acc;
  }
}

// Thread (p, q): rows p, p + s, p + 2s, ... (every sequence's position p) of column q, in order.
template <typename A, typename F>
__global__ void embedding_position_grad_kernel(const int32_t* ids, int64_t n, int64_t v,
                                               const A* d_out, int64_t s, int64_t d, F* d_pos) {
  MOE_GRID_LOOP(i, s * d) {
    const int64_t p = i / d, q = i % d;
    F acc = d_pos[i];
    for (int64_t r = p; r < n; r += s) {
      if (ids[r] < 0 || ids[r] >= v) continue;
      acc += static_cast<F>(load(d_out, r * d + q));
    }
    d_pos[i] = acc;
  }
}

}  // namespace

Status embedding_forward(Context& ctx, const TensorView& ids, const TensorView& table,
                         const TensorView& positions, int64_t seq_len, const TensorView& out) {
  const int64_t n = ids.dim(0), v = table.dim(0), d = table.dim(1);
  if (n * d == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("embedding_forward", out, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const F* pos = data_or_null<F>(positions);
    Status s = dispatch_float("embedding_forward", table, [&](auto wt) {
      using W = decltype(wt);
      embedding_forward_kernel<W, A, F><<<grid_for(n * d), kThreads, 0, stream_of(ctx)>>>(
          ids.data<int32_t>(), n, table.data<W>(), v, pos, FastDivmod(seq_len), FastDivmod(d),
          out.data<A>());
    });
    (void)s;  // the table's dtype was checked by the entry point
  }));
  return launch_status("embedding_forward");
}

Status embedding_backward(Context& ctx, const TensorView& ids, const TensorView& d_out,
                          const TensorView& d_table, const TensorView& d_positions,
                          int64_t seq_len) {
  const int64_t n = ids.dim(0), v = d_table.dim(0), d = d_table.dim(1);
  if (n * d == 0) return Status::OK();
  MOE_ASSIGN_OR_RETURN(KeyRuns runs, sort_rows_by_key(ctx, ids));
  MOE_RETURN_IF_ERROR(dispatch_act("embedding_backward", d_out, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    embedding_table_grad_kernel<A, F><<<grid_for(n * d), kThreads, 0, stream_of(ctx)>>>(
        runs.keys.data<int32_t>(), runs.rows.data<int32_t>(), n, v, d_out.data<A>(), FastDivmod(d),
        d_table.data<F>());
    if (d_positions.numel() > 0) {
      embedding_position_grad_kernel<A, F><<<grid_for(seq_len * d), kThreads, 0, stream_of(ctx)>>>(
          ids.data<int32_t>(), n, v, d_out.data<A>(), seq_len, d, d_positions.data<F>());
    }
  }));
  return launch_status("embedding_backward");
}

}  // namespace moe::kernels::cuda
