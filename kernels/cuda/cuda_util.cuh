// Helpers shared by the kernels/cuda/*.cu files: the context's stream, launch checks, grid sizes,
// dtype dispatch on the device types, and deterministic block reductions.
//
// Floating-point contraction policy of the CUDA backend: every .cu file is compiled with
// -fmad=false (kernels/cuda/CMakeLists.txt), and the CPU reference with -ffp-contract=off
// (kernels/CMakeLists.txt), so `a * b + c` rounds twice on both. Division and square root are
// IEEE round-to-nearest on both (nvcc's -prec-div/-prec-sqrt defaults). A kernel that runs the
// CPU's expressions in the CPU's order (ac_router.cu's statistics and metric, residual.cu's shift,
// the dispatch gathers and combines, argmax) therefore gives the CPU's bits, and its test compares
// bitwise. Anything through exp, log, tanh or erf (softmax, GELU, cross-entropy, SparseMixer's
// Gumbel draws) uses the device's libm, which may differ from glibc's in the last bit, and so
// does a sum in another order (block reductions, cuBLAS): those tests compare to a tolerance.
// A kernel that wants a fused multiply-add for speed writes __fmaf_rn / __fma_rn explicitly, with
// std::fma at the same place in its CPU reference.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "base/check.h"
#include "base/context.h"
#include "base/dtype.h"
#include "base/status.h"
#include "base/stream_graph.h"

namespace moe::kernels::cuda {

inline cudaStream_t stream_of(const Context& ctx) {
  return static_cast<cudaStream_t>(ctx.stream().handle);
}

// The status of the last launch on this thread (configuration errors; no wait).
inline Status launch_status(const char* op) {
  const cudaError_t err = cudaGetLastError();
  note_captured(op);  // a CUDA graph's recording: where a refused call broke it
  if (err == cudaSuccess) return Status::OK();
  return internal_error("cuda: ", op, ": kernel launch failed: ", cudaGetErrorString(err));
}

constexpr int kThreads = 256;

// A grid-stride loop over [0, n).
#define MOE_GRID_LOOP(i, n)                                                 \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// The most blocks along a grid's y (and z) dimension.
constexpr int64_t kMaxGridY = 65535;

// Rows per chunk of a column reduction whose chunks are a grid's y dimension: 256, or more when
// the rows would need more than kMaxGridY chunks (m > 16.7M rows).
inline int64_t rows_per_chunk(int64_t m) {
  return std::max<int64_t>(256, (m + kMaxGridY - 1) / kMaxGridY);
}

// Blocks for a grid-stride loop over n elements (at least 1, at most 65535 * 8).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 524280 ? 524280 : blocks));
}

// Loads any float type as its accumulation type; stores with rounding (bf16: nearest even).
template <typename T>
__device__ __forceinline__ accum_t<T> load(const T* p, int64_t i) {
  return static_cast<accum_t<T>>(p[i]);
}
// v rounded to T as store() writes it.
template <typename T, typename V>
__device__ __forceinline__ T rounded(V v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <typename T, typename V>
__device__ __forceinline__ void store(T* p, int64_t i, V v) {
  p[i] = rounded<T>(v);
}

// The segment s of v: starts[s] <= v < starts[s + 1], for `segments` segments whose starts
// ascend from starts[0] <= v (empty segments share a start and are skipped): a binary search of a
// few dozen cached entries (expert blocks' row offsets, chunk tables).
__device__ __forceinline__ int64_t segment_of(const int64_t* starts, int64_t segments, int64_t v) {
  int64_t lo = 0, hi = segments;  // starts[lo] <= v < starts[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (starts[mid] <= v) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Elements of T in one 16-byte word: 8 bf16, 4 f32, 2 f64. An elementwise kernel with one 2-byte
// load per thread keeps too few bytes in flight to reach the copy bandwidth (window 1's profile:
// the ReLU over 537 MB of bf16 at 1.2 TB/s, against 4.1 for a copy), so the kernels over long
// contiguous runs load and store whole words where every pointer they step through is on a
// 16-byte boundary (word_aligned), with the same per-element arithmetic as their one-element
// form (W = 1): the same bits either way.
template <typename T>
inline constexpr int kWordElems = 16 / static_cast<int>(sizeof(T));

template <typename T, int W>
struct alignas(sizeof(T) * W) Elems {
  T e[W];
};
// Word w of p (elements w W .. w W + W - 1).
template <typename T, int W>
__device__ __forceinline__ Elems<T, W> load_word(const T* p, int64_t w) {
  return reinterpret_cast<const Elems<T, W>*>(p)[w];
}
template <typename T, int W>
__device__ __forceinline__ void store_word(T* p, int64_t w, const Elems<T, W>& v) {
  reinterpret_cast<Elems<T, W>*>(p)[w] = v;
}
inline bool word_aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// out[i] = op(a[i]) (map1) or op(a[i], b[i]) (map2) for i in [0, n): in words of W elements, then
// the last n % W one per thread. An output may alias an input at the same offset (element i
// reads only element i), never at another.
template <int W, typename Op, typename A, typename O>
__global__ void map1_kernel(Op op, const A* a, int64_t n, O* out) {
  const int64_t words = n / W, done = words * W;
  MOE_GRID_LOOP(w, words) {
    const Elems<A, W> x = load_word<A, W>(a, w);
    Elems<O, W> y;
#pragma unroll
    for (int k = 0; k < W; ++k) y.e[k] = op(x.e[k]);
    store_word<O, W>(out, w, y);
  }
  MOE_GRID_LOOP(i, n - done) out[done + i] = op(a[done + i]);
}
template <int W, typename Op, typename A, typename B, typename O>
__global__ void map2_kernel(Op op, const A* a, const B* b, int64_t n, O* out) {
  const int64_t words = n / W, done = words * W;
  MOE_GRID_LOOP(w, words) {
    const Elems<A, W> x = load_word<A, W>(a, w);
    const Elems<B, W> z = load_word<B, W>(b, w);
    Elems<O, W> y;
#pragma unroll
    for (int k = 0; k < W; ++k) y.e[k] = op(x.e[k], z.e[k]);
    store_word<O, W>(out, w, y);
  }
  MOE_GRID_LOOP(i, n - done) out[done + i] = op(a[done + i], b[done + i]);
}

// Elements a word holds for every one of the types (the widest type's count).
template <typename... T>
inline constexpr int kCommonWordElems = std::min({kWordElems<T>...});

// Enqueues map1_kernel on ctx's stream: in words where every pointer is on a 16-byte boundary.
// `op` is a functor with a __device__ operator() of the element types.
template <typename Op, typename A, typename O>
void launch_map1(const Context& ctx, Op op, const A* a, int64_t n, O* out) {
  constexpr int W = kCommonWordElems<A, O>;
  if (word_aligned({a, out})) {
    map1_kernel<W><<<grid_for(n / W), kThreads, 0, stream_of(ctx)>>>(op, a, n, out);
  } else {
    map1_kernel<1><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(op, a, n, out);
  }
}
template <typename Op, typename A, typename B, typename O>
void launch_map2(const Context& ctx, Op op, const A* a, const B* b, int64_t n, O* out) {
  constexpr int W = kCommonWordElems<A, B, O>;
  if (word_aligned({a, b, out})) {
    map2_kernel<W><<<grid_for(n / W), kThreads, 0, stream_of(ctx)>>>(op, a, b, n, out);
  } else {
    map2_kernel<1><<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(op, a, b, n, out);
  }
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. A fixed tree: the same inputs give the same bits. `scratch` holds 32 values.
template <typename V>
__device__ V block_sum(V v, V* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  // Only warp 0 reads the partial sums, and it writes the total only after all its lanes have
  // read them (__syncwarp): no thread reads a slot that another writes without a barrier between
  // (every warp used to read scratch[0] while warp 0 wrote it: racecheck's hazard, which no CPU
  // test can see; tests/run_gpu.sh's racecheck stage confirms the fix).
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : V(0);
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    __syncwarp();
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

template <typename V>
__device__ V block_max(V v, V* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // scratch may still be read by an earlier call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {  // as in block_sum: warp 0 alone reads the partials, then writes the result
    const int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : scratch[0];
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xffffffffu, v, o));
    __syncwarp();
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

// Deterministic sum of f(i) for i in [0, n) in double, added to *out (one device double): a
// fixed grid writes per-block partials to `partials` (kReduceBlocks doubles), then one block adds
// them in order. f is a __device__ functor.
constexpr int kReduceBlocks = 256;

template <typename Fn>
__global__ void partial_sums_kernel(int64_t n, Fn f, double* partials) {
  __shared__ double scratch[32];
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    s += f(i);
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void finish_sum_kernel(const double* partials, int count, double* out);

// out[0] += sum_i pairs[2i], out[1] += sum_i pairs[2i + 1] for i in [0, n): one block (launch
// <<<1, kThreads>>>), fixed order. Per-row (value, count) pairs into a device accumulator.
__global__ void add_pair_sums_kernel(const double* pairs, int64_t n, double* out);

template <typename Fn>
Status reduce_sum(Context& ctx, const char* op, int64_t n, Fn f, double* out) {
  if (n <= 0) return Status::OK();
  MOE_ASSIGN_OR_RETURN(Tensor partials, ctx.empty({kReduceBlocks}, DType::kF64));
  const unsigned blocks = grid_for(n) < static_cast<unsigned>(kReduceBlocks)
                              ? grid_for(n)
                              : static_cast<unsigned>(kReduceBlocks);
  partial_sums_kernel<<<blocks, kThreads, 0, stream_of(ctx)>>>(n, f, partials.data<double>());
  finish_sum_kernel<<<1, kThreads, 0, stream_of(ctx)>>>(partials.data<double>(),
                                                        static_cast<int>(blocks), out);
  return launch_status(op);
}

// out[r] = ref::chunked_sum of row r of x [rows, n] (doubles, device): one kernel per level, one
// thread per run of kernels/cpu/chunked_sum.h's kSumChunk terms, so the bits equal the CPU's.
// Scratch comes from ctx; enqueued on its stream.
Status chunked_row_sums(Context& ctx, const double* x, int64_t rows, int64_t n, double* out);

}  // namespace moe::kernels::cuda
