#include "kernels/activation.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/common.h"
#include "kernels/cpu/activation_ref.h"
#include "kernels/cuda/activation.h"

namespace moe::kernels {

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::kRelu:
      return "relu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
  }
  return "?";
}

namespace {

// x [M, N] act and a per-row-group parameter p [G, N] of x's compute dtype.
Status check_bias(const Context& ctx, const char* op, const TensorView& x, const char* x_name,
                  const TensorView& p, const char* p_name, int64_t groups) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, x_name, x));
  if (x.ndim() != 2) return invalid_argument_error(op, ": ", x_name, " must be [M, N]");
  MOE_RETURN_IF_ERROR(check_device(ctx, op, p_name, p));
  const Shape want = groups < 0 ? Shape{x.dim(1)} : Shape{groups, x.dim(1)};
  return check_compute(op, p_name, p, x.dtype(), want);
}

// x[rows, :] += bias row (A act, F bias).
template <typename A, typename F>
void add_bias_rows(A* x, int64_t begin, int64_t end, int64_t n, const F* bias) {
  for (int64_t r = begin; r < end; ++r) {
    A* row = x + r * n;
    for (int64_t j = 0; j < n; ++j) row[j] = static_cast<A>(static_cast<F>(row[j]) + bias[j]);
  }
}

// x[rows, :] += bias row for every row, rows spread over the threads.
template <typename A, typename F>
void add_bias_parallel(A* x, int64_t begin, int64_t end, int64_t n, const F* bias) {
  parallel_for(end - begin, row_grain(n), [&](int64_t b, int64_t e) {
    add_bias_rows<A, F>(x, begin + b, begin + e, n, bias);
  });
}

// acc[j] += sum over rows [begin, end) of dy[r, j], rows added in order; the columns are spread
// over the threads (each column's sum runs on one thread, so its bits do not depend on them).
template <typename A>
void bias_grad_rows(const A* dy, int64_t begin, int64_t end, int64_t n, double* acc) {
  constexpr int64_t kCols = 32;
  parallel_for((n + kCols - 1) / kCols,
               std::max<int64_t>(1, kElementGrain / std::max<int64_t>(1, (end - begin) * kCols)),
               [&](int64_t c0, int64_t c1) {
                 const int64_t j0 = c0 * kCols, j1 = std::min(n, c1 * kCols);
                 for (int64_t r = begin; r < end; ++r) {
                   const A* row = dy + r * n;
                   for (int64_t j = j0; j < j1; ++j) acc[j] += static_cast<double>(row[j]);
                 }
               });
}

Status dropout_apply(Context& ctx, const char* op, const TensorView& x, const TensorView& row_keys,
                     int64_t key_base, CounterRng rng, float p, const TensorView& y) {
  MOE_KERNEL_ENTRY_CUDA(ctx, op);
  MOE_RETURN_IF_ERROR(check_act(ctx, op, "x", x));
  MOE_RETURN_IF_ERROR(check_like(op, x, "y", y));
  if (x.ndim() != 2) {
    return invalid_argument_error(op, ": x ", x.to_string(), " must be [M, N]");
  }
  if (!(p >= 0.f && p < 1.f)) return invalid_argument_error(op, ": p = ", p, " not in [0, 1)");
  const bool keyed = row_keys.numel() > 0;
  if (keyed) {
    MOE_RETURN_IF_ERROR(check_tensor(ctx, op, "row_keys", row_keys, DType::kI64, Shape{x.dim(0)}));
  }
  MOE_ON_CUDA(ctx, cuda::dropout(ctx, x, row_keys, key_base, rng, p, y));
  return dispatch_float(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = accum_t<T>;
    const int64_t m = x.dim(0), n = x.dim(1);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t* keys = keyed ? row_keys.data<int64_t>() : nullptr;
    if (p == 0.f) {
      if (px != py) std::memcpy(py, px, x.nbytes());
      for (int64_t r = 0; keyed && r < m; ++r) {
        if (keys[r] < 0) std::fill(py + r * n, py + (r + 1) * n, T(0));
      }
      return;
    }
    const C scale = static_cast<C>(1.0 / (1.0 - static_cast<double>(p)));
    // Element (r, j) uses lane j % 4 of Philox block key(r) * ceil(N / 4) + j / 4: four elements
    // per draw, and still a function of (row key, column) only.
    const uint64_t blocks_per_row = static_cast<uint64_t>((n + 3) / 4);
    parallel_for(m, row_grain(4 * n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t key = keyed ? keys[r] : key_base + r;
        if (key < 0) {
          std::fill(py + r * n, py + (r + 1) * n, T(0));
          continue;
        }
        for (int64_t j0 = 0; j0 < n; j0 += 4) {
          uint32_t bits[4];
          rng.block(static_cast<uint64_t>(key) * blocks_per_row + static_cast<uint64_t>(j0 / 4),
                    bits);
          for (int64_t j = j0; j < std::min(n, j0 + 4); ++j) {
            const float u = static_cast<float>(bits[j - j0] >> 8) * (1.0f / 16777216.0f);
            py[r * n + j] = u >= p ? static_cast<T>(static_cast<C>(px[r * n + j]) * scale) : T(0);
          }
        }
      }
    });
  });
}

}  // namespace

Status activation_forward(Context& ctx, Activation act, const TensorView& x, const TensorView& y) {
  constexpr const char* kOp = "activation_forward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "y", y));
  MOE_ON_CUDA(ctx, cuda::activation_forward(ctx, act, x, y));
  return dispatch_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    using C = accum_t<T>;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const int64_t n = x.numel();
    parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
      switch (act) {
        case Activation::kRelu:
          for (int64_t i = begin; i < end; ++i) py[i] = static_cast<C>(px[i]) > C(0) ? px[i] : T(0);
          break;
        default:
          for (int64_t i = begin; i < end; ++i) {
            py[i] = static_cast<T>(ref::apply_activation<C>(act, px[i]));
          }
      }
    });
  });
}

Status activation_backward(Context& ctx, Activation act, const TensorView& x, const TensorView& dy,
                           const TensorView& dx) {
  constexpr const char* kOp = "activation_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dy", dy));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dx", dx));
  MOE_ON_CUDA(ctx, cuda::activation_backward(ctx, act, x, dy, dx));
  return dispatch_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    using C = accum_t<T>;
    const T* px = x.data<T>();
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    const int64_t n = x.numel();
    parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) {
      switch (act) {
        case Activation::kRelu:
          // dy is read whatever the sign (an unconditional load), so the select vectorises.
          for (int64_t i = begin; i < end; ++i) {
            const T g = pdy[i];
            pdx[i] = static_cast<C>(px[i]) > C(0) ? g : T(0);
          }
          break;
        default:
          for (int64_t i = begin; i < end; ++i) {
            pdx[i] =
                static_cast<T>(ref::apply_activation_grad<C>(act, px[i]) * static_cast<C>(pdy[i]));
          }
      }
    });
  });
}

Status add_bias(Context& ctx, const TensorView& x, const TensorView& bias) {
  constexpr const char* kOp = "add_bias";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_bias(ctx, kOp, x, "x", bias, "bias", -1));
  MOE_ON_CUDA(ctx, cuda::add_bias(ctx, x, bias));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    add_bias_parallel<A, F>(x.data<A>(), 0, x.dim(0), x.dim(1), bias.data<F>());
  });
}

Status bias_grad(Context& ctx, const TensorView& dy, const TensorView& dbias) {
  constexpr const char* kOp = "bias_grad";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_bias(ctx, kOp, dy, "dy", dbias, "dbias", -1));
  MOE_ON_CUDA(ctx, cuda::bias_grad(ctx, dy, dbias));
  return dispatch_act(kOp, dy, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const int64_t n = dy.dim(1);
    std::vector<double> acc(n, 0.0);
    bias_grad_rows<A>(dy.data<A>(), 0, dy.dim(0), n, acc.data());
    F* db = dbias.data<F>();
    for (int64_t j = 0; j < n; ++j) db[j] = static_cast<F>(db[j] + acc[j]);
  });
}

Status add_bias_blocks(Context& ctx, const TensorView& x, const TensorView& bias,
                       const ExpertBlocks& blocks) {
  constexpr const char* kOp = "add_bias_blocks";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_bias(ctx, kOp, x, "x", bias, "bias", blocks.local_experts));
  MOE_RETURN_IF_ERROR(validate_blocks(kOp, blocks, x));
  MOE_ON_CUDA(ctx, cuda::add_bias_blocks(ctx, x, bias, blocks));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const int64_t n = x.dim(1);
    A* px = x.data<A>();
    for (int64_t b = 0; b < blocks.blocks(); ++b) {
      const auto [begin, end] = blocks.block_rows(b);
      const int64_t used = begin + filled_rows(blocks, b);
      add_bias_parallel<A, F>(px, begin, used, n, bias.data<F>() + blocks.expert_of(b) * n);
      std::fill(px + used * n, px + end * n, A(0));
    }
  });
}

Status bias_grad_blocks(Context& ctx, const TensorView& dy, const TensorView& dbias,
                        const ExpertBlocks& blocks) {
  constexpr const char* kOp = "bias_grad_blocks";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_bias(ctx, kOp, dy, "dy", dbias, "dbias", blocks.local_experts));
  MOE_RETURN_IF_ERROR(validate_blocks(kOp, blocks, dy));
  MOE_ON_CUDA(ctx, cuda::bias_grad_blocks(ctx, dy, dbias, blocks));
  return dispatch_act(kOp, dy, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    const int64_t n = dy.dim(1), experts = blocks.local_experts;
    std::vector<double> acc(experts * n, 0.0);
    for (int64_t b = 0; b < blocks.blocks(); ++b) {
      const int64_t begin = blocks.block_rows(b).first;
      bias_grad_rows<A>(dy.data<A>(), begin, begin + filled_rows(blocks, b), n,
                        acc.data() + blocks.expert_of(b) * n);
    }
    F* db = dbias.data<F>();
    for (int64_t i = 0; i < experts * n; ++i) db[i] = static_cast<F>(db[i] + acc[i]);
  });
}

Status dropout_forward(Context& ctx, const TensorView& x, const TensorView& row_keys,
                       int64_t key_base, CounterRng rng, float p, const TensorView& y) {
  return dropout_apply(ctx, "dropout_forward", x, row_keys, key_base, rng, p, y);
}

Status dropout_backward(Context& ctx, const TensorView& dy, const TensorView& row_keys,
                        int64_t key_base, CounterRng rng, float p, const TensorView& dx) {
  // Inverted dropout is linear with a fixed mask: its backward is the same masked scaling.
  return dropout_apply(ctx, "dropout_backward", dy, row_keys, key_base, rng, p, dx);
}

}  // namespace moe::kernels
