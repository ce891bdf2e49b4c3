// Activations (elementwise and SwiGLU), biases (dense and per expert block) and counter-based
// dropout on the GPU. The activation formulas are the reference's own
// (kernels/cpu/activation_math.h); bias gradients are column sums in double in a fixed order;
// dropout draws the same Philox blocks as the CPU, so masks match bit for bit.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/fast_divmod.h"
#include "kernels/common.h"
#include "kernels/cpu/activation_math.h"
#include "kernels/cpu/activation_ref.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/cuda_util.cuh"

namespace moe::kernels::cuda {
namespace {

// The reference computes in accum_t<T> after rounding the activation to it (f32 for f32 and bf16,
// f64 for f64): round the double result the same way.
template <typename T>
__device__ __forceinline__ T activation_value(Activation act, T x) {
  using C = accum_t<T>;
  const C xi = static_cast<C>(x);
  if (act == Activation::kRelu) return rounded<T>(xi > C(0) ? xi : C(0));
  return rounded<T>(ref::apply_activation<C>(act, xi));
}

template <typename T>
__device__ __forceinline__ T activation_grad_value(Activation act, T x, T dy) {
  using C = accum_t<T>;
  const C xi = static_cast<C>(x);
  if (act == Activation::kRelu) return rounded<T>(xi > C(0) ? static_cast<C>(dy) : C(0));
  return rounded<T>(ref::apply_activation_grad<C>(act, xi) * static_cast<C>(dy));
}

// The activation and its gradient as map1 / map2 functors (cuda_util.cuh: in 16-byte words).
struct ActivationOp {
  Activation act;
  template <typename T>
  __device__ T operator()(T x) const {
    return activation_value(act, x);
  }
};
struct ActivationGradOp {
  Activation act;
  template <typename T>
  __device__ T operator()(T x, T dy) const {
    return activation_grad_value(act, x, dy);
  }
};

// One thread per (row, column) pair: reads x[r, j] (gate) and x[r, F + j] (up).
template <typename T>
__global__ void swiglu_forward_kernel(const T* x, int64_t m, FastDivmod by_f, T* y) {
  using C = accum_t<T>;
  const int64_t f = by_f.divisor();
  MOE_GRID_LOOP(i, m * f) {
    int64_t r, j;
    by_f.divmod(i, &r, &j);
    const T* row = x + r * 2 * f;
    store(y, i, static_cast<C>(ref::swiglu(load(row, j), load(row, f + j))));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* x, const T* dy, int64_t m, FastDivmod by_f, T* dx) {
  using C = accum_t<T>;
  const int64_t f = by_f.divisor();
  MOE_GRID_LOOP(i, m * f) {
    int64_t r, j;
    by_f.divmod(i, &r, &j);
    const T* row = x + r * 2 * f;
    double d_gate = 0, d_up = 0;
    ref::swiglu_grad(load(row, j), load(row, f + j), load(dy, i), &d_gate, &d_up);
    store(dx, r * 2 * f + j, static_cast<C>(d_gate));
    store(dx, r * 2 * f + f + j, static_cast<C>(d_up));
  }
}

template <typename A, typename F>
__global__ void sigmoid_gate_forward_kernel(const A* x, const F* logit, int64_t m, FastDivmod by_n,
                                            A* y) {
  MOE_GRID_LOOP(i, m * by_n.divisor()) {
    const double s = ref::logistic(static_cast<double>(logit[by_n.div(i)]));
    store(y, i, static_cast<accum_t<A>>(s * static_cast<double>(load(x, i))));
  }
}

// One block per row: the row's dot product of dy and x in double (block_sum's fixed tree), then
// dx. block_sum's barriers order every read of dy before the first write of dx (they may alias).
template <typename A, typename F>
__global__ void sigmoid_gate_backward_kernel(const A* x, const F* logit, const A* dy, int64_t n,
                                             A* dx, A* dlogit) {
  __shared__ double scratch[32];
  const int64_t r = blockIdx.x;
  const A* xr = x + r * n;
  const A* dyr = dy + r * n;
  double dot = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    dot += static_cast<double>(load(dyr, j)) * static_cast<double>(load(xr, j));
  }
  dot = block_sum(dot, scratch);
  const double s = ref::logistic(static_cast<double>(logit[r]));
  if (threadIdx.x == 0) store(dlogit, r, static_cast<accum_t<A>>(s * (1.0 - s) * dot));
  A* dxr = dx + r * n;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    store(dxr, j, static_cast<accum_t<A>>(s * static_cast<double>(load(dyr, j))));
  }
}

// x + bias, as the reference rounds it: x widened to F, the sum rounded to A.
template <typename A, typename F>
__device__ __forceinline__ A biased(A x, F bias) {
  return rounded<A>(static_cast<F>(static_cast<accum_t<A>>(x)) + bias);
}

// Adds bias[j], bias[j + 1], ... to the W elements of word w of x (W divides the row width, so
// a word lies in one row, from its column j).
template <typename A, typename F, int W>
__device__ __forceinline__ void add_bias_word(A* x, int64_t w, const F* bias) {
  Elems<A, W> v = load_word<A, W>(x, w);
#pragma unroll
  for (int k = 0; k < W; ++k) v.e[k] = biased(v.e[k], bias[k]);
  store_word<A, W>(x, w, v);
}

// In words of W elements; W divides n (the launcher's choice).
template <typename A, typename F, int W>
__global__ void add_bias_kernel(A* x, int64_t m, FastDivmod by_n, const F* bias) {
  MOE_GRID_LOOP(w, m * by_n.divisor() / W) {
    int64_t r, j;
    by_n.divmod(w * W, &r, &j);
    add_bias_word<A, F, W>(x, w, bias + j);
  }
}

// Partial column sums: block (cx, chunk) sums rows [chunk * rows_per, ...) of columns
// cx * blockDim + t, in row order, into partial[chunk, col].
template <typename A>
__global__ void column_partials_kernel(const A* dy, int64_t m, int64_t n, int64_t rows_per,
                                       double* partial) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  const int64_t begin = blockIdx.y * rows_per;
  const int64_t end = begin + rows_per < m ? begin + rows_per : m;
  double s = 0;
#pragma unroll 8  // several rows' loads in flight; the adds stay in row order
  for (int64_t r = begin; r < end; ++r) s += static_cast<double>(load(dy, r * n + j));
  partial[blockIdx.y * n + j] = s;
}

template <typename F>
__global__ void column_finish_kernel(const double* partial, int64_t chunks, int64_t n, F* out) {
  MOE_GRID_LOOP(j, n) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * n + j];
    out[j] = static_cast<F>(static_cast<double>(out[j]) + s);
  }
}

// Rows in use of block b: the filled prefix (clamped to C), or all C rows without `filled`.
__device__ __forceinline__ int64_t used_rows(const int32_t* filled, int64_t b, int64_t cap) {
  if (filled == nullptr) return cap;
  const int64_t f = filled[b];
  return f < 0 ? 0 : (f > cap ? cap : f);
}

// Capacity mode: row i of block b = i / C gets its expert's bias, or zero past the filled prefix.
// In words of W elements; W divides n.
template <typename A, typename F, int W>
__global__ void add_bias_capacity_kernel(A* x, int64_t rows, FastDivmod by_n, const F* bias,
                                         const int32_t* filled, FastDivmod by_cap,
                                         FastDivmod by_experts) {
  const int64_t n = by_n.divisor(), cap = by_cap.divisor();
  MOE_GRID_LOOP(w, rows * n / W) {
    int64_t row, j, b, slot, expert, rank;
    by_n.divmod(w * W, &row, &j);
    by_cap.divmod(row, &b, &slot);
    by_experts.divmod(b, &rank, &expert);
    if (slot < used_rows(filled, b, cap)) {
      add_bias_word<A, F, W>(x, w, bias + expert * n + j);
    } else {
      Elems<A, W> zero;
#pragma unroll
      for (int k = 0; k < W; ++k) zero.e[k] = rounded<A>(F(0));
      store_word<A, W>(x, w, zero);
    }
  }
}

// Dropless: every block in one launch (one per block cost a launch per expert and rank: 11% of
// the fine-grained layer's time on the H200). Row r's block is the b with offsets[b] <= r <
// offsets[b + 1] (device offsets, blocks + 1 of them, ascending from 0 to rows): segment_of,
// once a word. In words of W elements; W divides n.
template <typename A, typename F, int W>
__global__ void add_bias_dropless_kernel(A* x, int64_t rows, FastDivmod by_n, const F* bias,
                                         const int64_t* offsets, int64_t blocks,
                                         FastDivmod by_experts) {
  const int64_t n = by_n.divisor();
  MOE_GRID_LOOP(w, rows * n / W) {
    int64_t row, j;
    by_n.divmod(w * W, &row, &j);
    int64_t rank, expert;
    by_experts.divmod(segment_of(offsets, blocks, row), &rank, &expert);
    add_bias_word<A, F, W>(x, w, bias + expert * n + j);
  }
}

// bias_grad_blocks in ref::bias_grad_blocks's order, in two kernels: partial[g, j], the sum of
// column j over chunk g's rows (kBiasGradChunk of one block's rows, from its first; one thread
// per (chunk, column)), then per (expert, column) the chunks of its blocks in rank and chunk
// order. Chunks of block b: [first(b), first(b + 1)); capacity mode: chunks_per_block of every
// block (those past the filled rows sum nothing: +0, which leaves a total unchanged), dropless:
// the device prefix `chunk_first` (blocks + 1 entries).
struct BiasGradChunks {
  int64_t cap = -1;                      // capacity, or -1 (dropless)
  int64_t chunks_per_block = 0;          // capacity mode
  const int32_t* filled = nullptr;       // capacity mode, optional
  const int64_t* offsets = nullptr;      // dropless: blocks + 1 row offsets
  const int64_t* chunk_first = nullptr;  // dropless: blocks + 1 chunk offsets
  int64_t blocks = 0, total = 0;         // blocks; chunks in all
  __device__ int64_t first(int64_t b) const {
    return cap >= 0 ? b * chunks_per_block : chunk_first[b];
  }
  // Chunk g's rows [*begin, *end).
  __device__ void rows(int64_t g, int64_t* begin, int64_t* end) const {
    int64_t b = 0, c = 0, block_end = 0;
    if (cap >= 0) {
      b = g / chunks_per_block;
      c = g - b * chunks_per_block;
      *begin = b * cap + c * ref::kBiasGradChunk;
      block_end = b * cap + used_rows(filled, b, cap);
    } else {
      b = segment_of(chunk_first, blocks, g);
      *begin = offsets[b] + (g - chunk_first[b]) * ref::kBiasGradChunk;
      block_end = offsets[b + 1];
    }
    const int64_t chunk_end = *begin + ref::kBiasGradChunk;
    *end = chunk_end < block_end ? chunk_end : block_end;
  }
};

template <typename A>
__global__ void bias_grad_chunks_kernel(const A* dy, int64_t n, BiasGradChunks ch,
                                        double* partial) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= n) return;
  for (int64_t g = blockIdx.y; g < ch.total; g += gridDim.y) {
    int64_t begin = 0, end = 0;
    ch.rows(g, &begin, &end);
    double s = 0;
    // Unrolled so that several rows' loads are in flight at once (the adds stay in row order).
#pragma unroll 8
    for (int64_t row = begin; row < end; ++row) s += static_cast<double>(load(dy, row * n + j));
    partial[g * n + j] = s;
  }
}

// dbias[l, j] += the chunks of l's blocks b = r E_l + l (r ascending), in chunk order.
template <typename F>
__global__ void bias_grad_blocks_finish_kernel(const double* partial, int64_t n, int64_t ranks,
                                               FastDivmod by_n, BiasGradChunks ch, F* dbias) {
  const int64_t experts = ch.blocks / ranks;
  MOE_GRID_LOOP(i, experts * n) {
    int64_t l, j;
    by_n.divmod(i, &l, &j);
    double s = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      const int64_t b = r * experts + l;
      for (int64_t g = ch.first(b); g < ch.first(b + 1); ++g) s += partial[g * n + j];
    }
    dbias[i] = static_cast<F>(static_cast<double>(dbias[i]) + s);
  }
}

// Rows of m x n; per_row = ceil(n / 4) Philox blocks to a row.
struct DropoutShape {
  int64_t m, n;
  FastDivmod per_row;
};

// One thread per Philox block: elements (r, 4q .. 4q + 3).
// A step in device memory (rng.device_step, a recorded launch) is read here, as the kernel runs.
template <typename T>
__global__ void dropout_kernel(const T* x, const int64_t* keys, int64_t key_base, CounterRng rng,
                               float p, DropoutShape shape, T* y) {
  using C = accum_t<T>;
  const int64_t m = shape.m, n = shape.n, per_row = shape.per_row.divisor();
  const C scale = static_cast<C>(1.0 / (1.0 - static_cast<double>(p)));
  const int64_t base = key_base + rng.key_shift();
  rng = rng.at_step();
  MOE_GRID_LOOP(t, m * per_row) {
    int64_t r, q;
    shape.per_row.divmod(t, &r, &q);
    const int64_t key = keys != nullptr ? keys[r] : base + r;
    const int64_t j0 = q * 4;
    const int64_t j1 = j0 + 4 < n ? j0 + 4 : n;
    if (key < 0) {
      for (int64_t j = j0; j < j1; ++j) store(y, r * n + j, C(0));
      continue;
    }
    if (p == 0.f) {
      for (int64_t j = j0; j < j1; ++j) y[r * n + j] = x[r * n + j];
      continue;
    }
    uint32_t bits[4];
    rng.block(
        static_cast<uint64_t>(key) * static_cast<uint64_t>(per_row) + static_cast<uint64_t>(q),
        bits);
    for (int64_t j = j0; j < j1; ++j) {
      const float u = static_cast<float>(bits[j - j0] >> 8) * (1.0f / 16777216.0f);
      store(y, r * n + j, u >= p ? static_cast<C>(load(x, r * n + j)) * scale : C(0));
    }
  }
}

}  // namespace

Status activation_forward(Context& ctx, Activation act, const TensorView& x, const TensorView& y) {
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("activation_forward", x, [&](auto tag) {
    using T = decltype(tag);
    launch_map1(ctx, ActivationOp{act}, x.data<T>(), n, y.data<T>());
  }));
  return launch_status("activation_forward");
}

Status activation_backward(Context& ctx, Activation act, const TensorView& x, const TensorView& dy,
                           const TensorView& dx) {
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("activation_backward", x, [&](auto tag) {
    using T = decltype(tag);
    launch_map2(ctx, ActivationGradOp{act}, x.data<T>(), dy.data<T>(), n, dx.data<T>());
  }));
  return launch_status("activation_backward");
}

Status swiglu_forward(Context& ctx, const TensorView& x, const TensorView& y) {
  const int64_t m = y.dim(0), f = y.dim(1);
  if (m * f == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("swiglu_forward", x, [&](auto tag) {
    using T = decltype(tag);
    swiglu_forward_kernel<T><<<grid_for(m * f), kThreads, 0, stream_of(ctx)>>>(
        x.data<T>(), m, FastDivmod(f), y.data<T>());
  }));
  return launch_status("swiglu_forward");
}

Status swiglu_backward(Context& ctx, const TensorView& x, const TensorView& dy,
                       const TensorView& dx) {
  const int64_t m = dy.dim(0), f = dy.dim(1);
  if (m * f == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("swiglu_backward", x, [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<grid_for(m * f), kThreads, 0, stream_of(ctx)>>>(
        x.data<T>(), dy.data<T>(), m, FastDivmod(f), dx.data<T>());
  }));
  return launch_status("swiglu_backward");
}

Status sigmoid_gate_forward(Context& ctx, const TensorView& x, const TensorView& logit,
                            const TensorView& y) {
  const int64_t m = x.dim(0), n = x.dim(1);
  if (m * n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("sigmoid_gate_forward", x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    sigmoid_gate_forward_kernel<A, F><<<grid_for(m * n), kThreads, 0, stream_of(ctx)>>>(
        x.data<A>(), logit.data<F>(), m, FastDivmod(n), y.data<A>());
  }));
  return launch_status("sigmoid_gate_forward");
}

Status sigmoid_gate_backward(Context& ctx, const TensorView& x, const TensorView& logit,
                             const TensorView& dy, const TensorView& dx, const TensorView& dlogit) {
  const int64_t m = x.dim(0), n = x.dim(1);
  if (m == 0) return Status::OK();
  if (m > 0x7fffffff) {
    return invalid_argument_error("sigmoid_gate_backward: ", m, " rows exceed one grid's blocks");
  }
  MOE_RETURN_IF_ERROR(dispatch_act("sigmoid_gate_backward", x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    sigmoid_gate_backward_kernel<A, F><<<static_cast<unsigned>(m), kThreads, 0, stream_of(ctx)>>>(
        x.data<A>(), logit.data<F>(), dy.data<A>(), n, dx.data<A>(), dlogit.data<A>());
  }));
  return launch_status("sigmoid_gate_backward");
}

namespace {

// Whether the bias kernels may take x [rows, n] in words of W: every row starts on a 16-byte
// boundary and holds whole words.
template <typename A>
bool bias_words(const TensorView& x, int64_t n) {
  return n % kWordElems<A> == 0 && word_aligned({x.data<A>()});
}

}  // namespace

Status add_bias(Context& ctx, const TensorView& x, const TensorView& bias) {
  const int64_t m = x.dim(0), n = x.dim(1);
  if (m * n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_act("add_bias", x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    constexpr int W = kWordElems<A>;
    const cudaStream_t stream = stream_of(ctx);
    if (bias_words<A>(x, n)) {
      add_bias_kernel<A, F, W><<<grid_for(m * n / W), kThreads, 0, stream>>>(
          x.data<A>(), m, FastDivmod(n), bias.data<F>());
    } else {
      add_bias_kernel<A, F, 1>
          <<<grid_for(m * n), kThreads, 0, stream>>>(x.data<A>(), m, FastDivmod(n), bias.data<F>());
    }
  }));
  return launch_status("add_bias");
}

Status bias_grad(Context& ctx, const TensorView& dy, const TensorView& dbias) {
  const int64_t m = dy.dim(0), n = dy.dim(1);
  if (m == 0 || n == 0) return Status::OK();
  const int64_t rows_per = rows_per_chunk(m);
  const int64_t chunks = (m + rows_per - 1) / rows_per;
  MOE_ASSIGN_OR_RETURN(Tensor partial, ctx.empty({chunks, n}, DType::kF64));
  MOE_RETURN_IF_ERROR(dispatch_act("bias_grad", dy, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                    static_cast<unsigned>(chunks));
    column_partials_kernel<A><<<grid, kThreads, 0, stream_of(ctx)>>>(dy.data<A>(), m, n, rows_per,
                                                                     partial.data<double>());
    column_finish_kernel<F><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(
        partial.data<double>(), chunks, n, dbias.data<F>());
  }));
  return launch_status("bias_grad");
}

namespace {

// add_bias_blocks's kernel for its mode, in words of W elements (W divides x's row width).
template <typename A, typename F, int W>
void launch_add_bias_blocks(Context& ctx, const TensorView& x, const TensorView& bias,
                            const ExpertBlocks& blocks, const Tensor& offsets) {
  const int64_t rows = x.dim(0), n = x.dim(1);
  const unsigned grid = grid_for(rows * n / W);
  if (blocks.capacity >= 0) {
    const int32_t* filled = blocks.filled.numel() > 0 ? blocks.filled.data<int32_t>() : nullptr;
    add_bias_capacity_kernel<A, F, W><<<grid, kThreads, 0, stream_of(ctx)>>>(
        x.data<A>(), rows, FastDivmod(n), bias.data<F>(), filled, FastDivmod(blocks.capacity),
        FastDivmod(blocks.local_experts));
    return;
  }
  add_bias_dropless_kernel<A, F, W><<<grid, kThreads, 0, stream_of(ctx)>>>(
      x.data<A>(), rows, FastDivmod(n), bias.data<F>(), offsets.data<int64_t>(), blocks.blocks(),
      FastDivmod(blocks.local_experts));
}

}  // namespace

Status add_bias_blocks(Context& ctx, const TensorView& x, const TensorView& bias,
                       const ExpertBlocks& blocks) {
  const int64_t rows = x.dim(0), n = x.dim(1);
  if (rows * n == 0) return Status::OK();
  Tensor offsets;
  if (blocks.capacity < 0) {
    // Dropless offsets live on the host: upload them (stream-ordered, no wait).
    Tensor host = Tensor::from_vector<int64_t>(Shape{static_cast<int64_t>(blocks.offsets.size())},
                                               blocks.offsets);
    MOE_ASSIGN_OR_RETURN(offsets, ctx.upload(host.view()));
  }
  MOE_RETURN_IF_ERROR(dispatch_act("add_bias_blocks", x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    if (bias_words<A>(x, n)) {
      launch_add_bias_blocks<A, F, kWordElems<A>>(ctx, x, bias, blocks, offsets);
    } else {
      launch_add_bias_blocks<A, F, 1>(ctx, x, bias, blocks, offsets);
    }
  }));
  return launch_status("add_bias_blocks");
}

Status bias_grad_blocks(Context& ctx, const TensorView& dy, const TensorView& dbias,
                        const ExpertBlocks& blocks) {
  const int64_t n = dy.dim(1), experts = blocks.local_experts;
  if (n == 0 || experts == 0) return Status::OK();
  BiasGradChunks ch;
  ch.blocks = blocks.blocks();
  Tensor tables;  // dropless: the row offsets, then the chunk offsets
  if (blocks.capacity >= 0) {
    ch.cap = blocks.capacity;
    ch.chunks_per_block = (blocks.capacity + ref::kBiasGradChunk - 1) / ref::kBiasGradChunk;
    ch.filled = blocks.filled.numel() > 0 ? blocks.filled.data<int32_t>() : nullptr;
    ch.total = ch.blocks * ch.chunks_per_block;
  } else {
    // Dropless offsets live on the host: the chunk table is made there and both are uploaded
    // (stream-ordered, no wait).
    std::vector<int64_t> host = blocks.offsets;
    int64_t chunks = 0;
    host.push_back(0);
    for (int64_t b = 0; b < ch.blocks; ++b) {
      const int64_t rows = blocks.offsets[b + 1] - blocks.offsets[b];
      chunks += (rows + ref::kBiasGradChunk - 1) / ref::kBiasGradChunk;
      host.push_back(chunks);
    }
    ch.total = chunks;
    Tensor t = Tensor::from_vector<int64_t>(Shape{static_cast<int64_t>(host.size())}, host);
    MOE_ASSIGN_OR_RETURN(tables, ctx.upload(t.view()));
    ch.offsets = tables.data<int64_t>();
    ch.chunk_first = ch.offsets + ch.blocks + 1;
  }
  // No chunk at all still rounds dbias + 0.0 as the CPU does (-0 becomes +0).
  MOE_ASSIGN_OR_RETURN(Tensor partial, ctx.empty({std::max<int64_t>(1, ch.total), n}, DType::kF64));
  MOE_RETURN_IF_ERROR(dispatch_act("bias_grad_blocks", dy, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                    static_cast<unsigned>(std::max<int64_t>(1, std::min(ch.total, kMaxGridY))));
    bias_grad_chunks_kernel<A>
        <<<grid, kThreads, 0, stream_of(ctx)>>>(dy.data<A>(), n, ch, partial.data<double>());
    bias_grad_blocks_finish_kernel<F><<<grid_for(experts * n), kThreads, 0, stream_of(ctx)>>>(
        partial.data<double>(), n, blocks.ranks, FastDivmod(n), ch, dbias.data<F>());
  }));
  return launch_status("bias_grad_blocks");
}

Status dropout(Context& ctx, const TensorView& x, const TensorView& row_keys, int64_t key_base,
               CounterRng rng, float p, const TensorView& y) {
  const int64_t m = x.dim(0), n = x.dim(1);
  if (m * n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("dropout", x, [&](auto tag) {
    using T = decltype(tag);
    const int64_t* keys = data_or_null<int64_t>(row_keys);
    dropout_kernel<T><<<grid_for(m * ((n + 3) / 4)), kThreads, 0, stream_of(ctx)>>>(
        x.data<T>(), keys, key_base, rng, p, DropoutShape{m, n, FastDivmod((n + 3) / 4)},
        y.data<T>());
  }));
  return launch_status("dropout");
}

}  // namespace moe::kernels::cuda
