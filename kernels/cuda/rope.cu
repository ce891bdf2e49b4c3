// Rotary position embeddings on the GPU: a table kernel computes each (position, pair) angle's
// cos and sin in double (rope_math.h, as the CPU) and rounds them to F; the rotation kernel then
// gives one thread per (row, pair of q or k), which also copies one element of v when out is not
// in. Every element is written by one thread in the CPU's expression order: deterministic.
#include "base/fast_divmod.h"
#include "kernels/common.h"
#include "kernels/cpu/rope_math.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/rope.h"

namespace moe::kernels::cuda {
namespace {

// cos_sin [S, Dh/2, 2] F: (cos, sin) of rope_angle(s, i, head_dim, base).
template <typename F>
__global__ void rope_table_kernel(int64_t seq_len, int64_t head_dim, double base, F* cos_sin) {
  const int64_t half = head_dim / 2;
  MOE_GRID_LOOP(idx, seq_len * half) {
    const double angle = ref::rope_angle(idx / half, idx % half, head_dim, base);
    cos_sin[2 * idx] = static_cast<F>(cos(angle));
    cos_sin[2 * idx + 1] = static_cast<F>(sin(angle));
  }
}

// The sizes of rope_rotate_kernel: in, out [rows, 3 d_model]; the table covers seq_len positions.
struct RopeRotateShape {
  int64_t rows;                       // B * S; a row's position is r % seq_len
  int64_t head_dim;                   // Dh = D / H
  FastDivmod seq_len, d_model, half;  // S, D and Dh / 2, as divisors (base/fast_divmod.h)
};

// Pair p of row r (p in [0, D): head p / half of q then of k, element i = p % half) turned by the
// table's angle for position r % S; sign -1 turns it back (the transpose). Thread (r, p) also
// copies v[r, p] when copy_v. Each pair is read before it is written, so out may be in.
template <typename T, typename F>
__global__ void rope_rotate_kernel(const T* in, RopeRotateShape shape, const F* cos_sin,
                                   double sign, bool copy_v, T* out) {
  const int64_t rows = shape.rows, d_model = shape.d_model.divisor();
  const int64_t head_dim = shape.head_dim, half = shape.half.divisor();
  MOE_GRID_LOOP(idx, rows * d_model) {
    int64_t r, p, pair, e, seq, position;
    shape.d_model.divmod(idx, &r, &p);
    shape.half.divmod(p, &pair, &e);
    shape.seq_len.divmod(r, &seq, &position);
    const int64_t col = pair * head_dim + e;
    const F* cs = cos_sin + 2 * (position * half + e);
    const int64_t base = r * 3 * d_model;
    const ref::RopePair y = ref::rope_turn(
        static_cast<double>(load(in, base + col)), static_cast<double>(load(in, base + col + half)),
        static_cast<double>(cs[0]), sign * static_cast<double>(cs[1]));
    store(out, base + col, y.y0);
    store(out, base + col + half, y.y1);
    if (copy_v) out[base + 2 * d_model + p] = in[base + 2 * d_model + p];
  }
}

}  // namespace

Status rope(Context& ctx, const RopeArgs& args, bool transpose, const TensorView& in,
            const TensorView& out) {
  const int64_t rows = in.dim(0), d_model = in.dim(1) / 3, head_dim = d_model / args.heads;
  const int64_t half = head_dim / 2;
  if (rows == 0 || half == 0) return Status::OK();
  const char* op = transpose ? "rope_backward" : "rope_forward";
  RopeRotateShape shape;
  shape.rows = rows;
  shape.head_dim = head_dim;
  shape.seq_len = FastDivmod(args.seq_len);
  shape.d_model = FastDivmod(d_model);
  shape.half = FastDivmod(half);
  MOE_ASSIGN_OR_RETURN(Tensor table, ctx.empty({args.seq_len, half, 2}, compute_dtype(in.dtype())));
  MOE_RETURN_IF_ERROR(dispatch_act(op, in, [&](auto at, auto ft) {
    using T = decltype(at);
    using F = decltype(ft);
    rope_table_kernel<F><<<grid_for(args.seq_len * half), kThreads, 0, stream_of(ctx)>>>(
        args.seq_len, head_dim, args.base, table.data<F>());
    rope_rotate_kernel<T, F><<<grid_for(rows * d_model), kThreads, 0, stream_of(ctx)>>>(
        in.data<T>(), shape, table.data<F>(), transpose ? -1.0 : 1.0, in.data<T>() != out.data<T>(),
        out.data<T>());
  }));
  return launch_status(op);
}

}  // namespace moe::kernels::cuda
