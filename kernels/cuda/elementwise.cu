// Elementwise ops of kernels/elementwise.h on the GPU: grid-stride loops in the accumulation type,
// deterministic reductions for the non-finite count.
#include <cmath>

#include "base/fast_divmod.h"
#include "kernels/common.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace moe::kernels::cuda {
namespace {

// The ops as map1 / map2 functors (cuda_util.cuh: in 16-byte words where aligned).
struct AddOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return rounded<T>(static_cast<accum_t<T>>(a) + static_cast<accum_t<T>>(b));
  }
};

// y + alpha x, in double, rounded to y's type (map2's a is x, b is y).
struct AxpyOp {
  double alpha;
  template <typename X, typename Y>
  __device__ Y operator()(X x, Y y) const {
    return rounded<Y>(static_cast<double>(static_cast<accum_t<Y>>(y)) +
                      alpha * static_cast<double>(static_cast<accum_t<X>>(x)));
  }
};

struct ScaleOp {
  double alpha;
  template <typename T>
  __device__ T operator()(T x) const {
    return rounded<T>(alpha * static_cast<double>(static_cast<accum_t<T>>(x)));
  }
};

template <typename D>
struct ConvertOp {
  template <typename S>
  __device__ D operator()(S x) const {
    return rounded<D>(static_cast<accum_t<S>>(x));
  }
};

__global__ void add_scalar_kernel(double* out, int64_t n, double value) {
  MOE_GRID_LOOP(i, n) { out[i] += value; }
}

template <typename T>
struct NonFinite {
  const T* x;
  __device__ double operator()(int64_t i) const {
    const double v = static_cast<double>(load(x, i));
    return isfinite(v) ? 0.0 : 1.0;
  }
};

template <typename T>
__global__ void copy_columns_kernel(const T* src, int64_t src_cols, int64_t src_col, T* dst,
                                    int64_t dst_cols, int64_t dst_col, int64_t rows,
                                    FastDivmod by_width) {
  MOE_GRID_LOOP(i, rows * by_width.divisor()) {
    int64_t r, j;
    by_width.divmod(i, &r, &j);
    dst[r * dst_cols + dst_col + j] = src[r * src_cols + src_col + j];
  }
}

template <typename Fn>
Status pair(const char* op, const TensorView& x, const TensorView& y, Fn&& f) {
  Status inner = Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float(
      op, x, [&](auto xt) { inner = dispatch_float(op, y, [&](auto yt) { f(xt, yt); }); }));
  return inner;
}

}  // namespace

Status add(Context& ctx, const TensorView& a, const TensorView& b, const TensorView& out) {
  const int64_t n = a.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("add", a, [&](auto tag) {
    using T = decltype(tag);
    launch_map2(ctx, AddOp{}, a.data<T>(), b.data<T>(), n, out.data<T>());
  }));
  return launch_status("add");
}

Status axpy(Context& ctx, double alpha, const TensorView& x, const TensorView& y) {
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(pair("axpy", x, y, [&](auto xt, auto yt) {
    using X = decltype(xt);
    using Y = decltype(yt);
    launch_map2(ctx, AxpyOp{alpha}, x.data<X>(), y.data<Y>(), n, y.data<Y>());
  }));
  return launch_status("axpy");
}

Status scale(Context& ctx, const TensorView& x, double alpha) {
  const int64_t n = x.numel();
  if (n == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("scale", x, [&](auto tag) {
    using T = decltype(tag);
    launch_map1(ctx, ScaleOp{alpha}, x.data<T>(), n, x.data<T>());
  }));
  return launch_status("scale");
}

Status convert(Context& ctx, const TensorView& src, const TensorView& dst) {
  const int64_t n = src.numel();
  if (n == 0) return Status::OK();
  if (src.dtype() == dst.dtype()) return ctx.copy(src, dst);
  MOE_RETURN_IF_ERROR(pair("convert", src, dst, [&](auto st, auto dt) {
    using S = decltype(st);
    using D = decltype(dt);
    launch_map1(ctx, ConvertOp<D>{}, src.data<S>(), n, dst.data<D>());
  }));
  return launch_status("convert");
}

Status copy_columns(Context& ctx, const TensorView& src, int64_t src_col, const TensorView& dst,
                    int64_t dst_col, int64_t width) {
  const int64_t rows = src.dim(0);
  if (rows * width == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("copy_columns", src, [&](auto tag) {
    using T = decltype(tag);
    copy_columns_kernel<T><<<grid_for(rows * width), kThreads, 0, stream_of(ctx)>>>(
        src.data<T>(), src.dim(1), src_col, dst.data<T>(), dst.dim(1), dst_col, rows,
        FastDivmod(width));
  }));
  return launch_status("copy_columns");
}

Status count_nonfinite(Context& ctx, const TensorView& x, const TensorView& out) {
  Status launched = Status::OK();
  MOE_RETURN_IF_ERROR(dispatch_float("count_nonfinite", x, [&](auto tag) {
    using T = decltype(tag);
    launched = reduce_sum(ctx, "count_nonfinite", x.numel(), NonFinite<T>{x.data<T>()},
                          out.data<double>());
  }));
  return launched;
}

Status add_scalar(Context& ctx, const TensorView& out, double value) {
  const int64_t n = out.numel();
  if (n == 0) return Status::OK();
  add_scalar_kernel<<<grid_for(n), kThreads, 0, stream_of(ctx)>>>(out.data<double>(), n, value);
  return launch_status("add_scalar");
}

}  // namespace moe::kernels::cuda
