#include "kernels/activation.h"

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
    case Activation::kSilu:
      return "silu";
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

// x [M, 2F] act with an even number of columns ([gate | up] halves); F is returned in *f.
Status check_gated(const Context& ctx, const char* op, const TensorView& x, int64_t* f) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, "x", x));
  if (x.ndim() != 2 || x.dim(1) % 2 != 0) {
    return invalid_argument_error(op, ": x ", x.to_string(),
                                  " must be [M, 2F] (the gate and up halves)");
  }
  *f = x.dim(1) / 2;
  return Status::OK();
}

// x [M, N] act and one gate logit per row, logit [M, 1] of x's compute dtype.
Status check_row_gate(const Context& ctx, const char* op, const TensorView& x,
                      const TensorView& logit) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, "x", x));
  if (x.ndim() != 2) return invalid_argument_error(op, ": x ", x.to_string(), " must be [M, N]");
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "logit", logit));
  return check_compute(op, "logit", logit, x.dtype(), Shape{x.dim(0), 1});
}

// `out` must not start where `in` does (an in-place call; the halves would overwrite its input).
Status check_not_in_place(const char* op, const TensorView& in, const char* in_name,
                          const TensorView& out, const char* out_name) {
  if (in.numel() > 0 && out.same_data(in)) {
    return invalid_argument_error(op, ": ", out_name, " must not overlap ", in_name);
  }
  return Status::OK();
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
    // A step in device memory (rng.device_step) is host memory here: read now.
    ref::dropout<T>(x.data<T>(), x.dim(0), x.dim(1), keyed ? row_keys.data<int64_t>() : nullptr,
                    key_base + rng.key_shift(), rng.at_step(), p, y.data<T>());
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
    ref::activation_forward<T>(act, x.data<T>(), x.numel(), y.data<T>());
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
    ref::activation_backward<T>(act, x.data<T>(), dy.data<T>(), x.numel(), dx.data<T>());
  });
}

Status swiglu_forward(Context& ctx, const TensorView& x, const TensorView& y) {
  constexpr const char* kOp = "swiglu_forward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  int64_t f = 0;
  MOE_RETURN_IF_ERROR(check_gated(ctx, kOp, x, &f));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "y", y, x.dtype(), Shape{x.dim(0), f}));
  MOE_RETURN_IF_ERROR(check_not_in_place(kOp, x, "x", y, "y"));
  MOE_ON_CUDA(ctx, cuda::swiglu_forward(ctx, x, y));
  return dispatch_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::swiglu_forward<T>(x.data<T>(), x.dim(0), f, y.data<T>());
  });
}

Status swiglu_backward(Context& ctx, const TensorView& x, const TensorView& dy,
                       const TensorView& dx) {
  constexpr const char* kOp = "swiglu_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  int64_t f = 0;
  MOE_RETURN_IF_ERROR(check_gated(ctx, kOp, x, &f));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "dy", dy, x.dtype(), Shape{x.dim(0), f}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "dx", dx, x.dtype(), x.shape()));
  MOE_RETURN_IF_ERROR(check_not_in_place(kOp, x, "x", dx, "dx"));
  MOE_RETURN_IF_ERROR(check_not_in_place(kOp, dy, "dy", dx, "dx"));
  MOE_ON_CUDA(ctx, cuda::swiglu_backward(ctx, x, dy, dx));
  return dispatch_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::swiglu_backward<T>(x.data<T>(), dy.data<T>(), x.dim(0), f, dx.data<T>());
  });
}

Status sigmoid_gate_forward(Context& ctx, const TensorView& x, const TensorView& logit,
                            const TensorView& y) {
  constexpr const char* kOp = "sigmoid_gate_forward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_row_gate(ctx, kOp, x, logit));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "y", y));
  MOE_ON_CUDA(ctx, cuda::sigmoid_gate_forward(ctx, x, logit, y));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::sigmoid_gate_forward<A, F>(x.data<A>(), logit.data<F>(), x.dim(0), x.dim(1), y.data<A>());
  });
}

Status sigmoid_gate_backward(Context& ctx, const TensorView& x, const TensorView& logit,
                             const TensorView& dy, const TensorView& dx, const TensorView& dlogit) {
  constexpr const char* kOp = "sigmoid_gate_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_row_gate(ctx, kOp, x, logit));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dy", dy));
  MOE_RETURN_IF_ERROR(check_like(kOp, x, "dx", dx));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "dlogit", dlogit, x.dtype(), Shape{x.dim(0), 1}));
  MOE_RETURN_IF_ERROR(check_not_in_place(kOp, x, "x", dx, "dx"));
  MOE_ON_CUDA(ctx, cuda::sigmoid_gate_backward(ctx, x, logit, dy, dx, dlogit));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::sigmoid_gate_backward<A, F>(x.data<A>(), logit.data<F>(), dy.data<A>(), x.dim(0), x.dim(1),
                                     dx.data<A>(), dlogit.data<A>());
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
    ref::add_bias<A, F>(x.data<A>(), x.dim(0), x.dim(1), bias.data<F>());
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
    ref::bias_grad<A, F>(dy.data<A>(), dy.dim(0), dy.dim(1), dbias.data<F>());
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
    ref::add_bias_blocks<A, F>(blocks, x.data<A>(), x.dim(1), bias.data<F>());
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
    ref::bias_grad_blocks<A, F>(blocks, dy.data<A>(), dy.dim(1), dbias.data<F>());
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
