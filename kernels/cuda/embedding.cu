// Embedding lookup and its deterministic backward on the GPU. The backward adds rows in token
// order (one thread per column walks the tokens), the reference's order, so the gradients match
// the CPU bit for bit in f32 and f64.
#include "kernels/common.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/embedding.h"

namespace moe::kernels::cuda {
namespace {

template <typename W, typename A, typename F>
__global__ void embedding_forward_kernel(const int32_t* ids, int64_t n, const W* table, int64_t v,
                                         const F* pos, int64_t s, int64_t d, A* out) {
  MOE_GRID_LOOP(i, n * d) {
    const int64_t r = i / d, j = i % d;
    const int32_t id = ids[r];
    if (id < 0 || id >= v) {
      store(out, i, F(0));
    } else if (pos == nullptr) {
      store(out, i, load(table, static_cast<int64_t>(id) * d + j));
    } else {
      store(out, i,
            static_cast<F>(load(table, static_cast<int64_t>(id) * d + j)) + pos[(r % s) * d + j]);
    }
  }
}

template <typename A, typename F>
__global__ void embedding_backward_kernel(const int32_t* ids, int64_t n, int64_t v, const A* d_out,
                                          int64_t s, int64_t d, F* d_table, F* d_pos) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= d) return;
  for (int64_t r = 0; r < n; ++r) {
    const int32_t id = ids[r];
    if (id < 0 || id >= v) continue;
    const F g = static_cast<F>(load(d_out, r * d + j));
    d_table[static_cast<int64_t>(id) * d + j] += g;
    if (d_pos != nullptr) d_pos[(r % s) * d + j] += g;
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
          ids.data<int32_t>(), n, table.data<W>(), v, pos, seq_len, d, out.data<A>());
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
  MOE_RETURN_IF_ERROR(dispatch_act("embedding_backward", d_out, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    F* dpos = data_or_null<F>(d_positions);
    embedding_backward_kernel<A, F>
        <<<static_cast<unsigned>((d + kThreads - 1) / kThreads), kThreads, 0, stream_of(ctx)>>>(
            ids.data<int32_t>(), n, v, d_out.data<A>(), seq_len, d, d_table.data<F>(), dpos);
  }));
  return launch_status("embedding_backward");
}

}  // namespace moe::kernels::cuda
