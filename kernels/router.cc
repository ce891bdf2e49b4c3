#include "kernels/router.h"

#include <algorithm>
#include <cmath>

#include "kernels/common.h"
#include "kernels/cpu/router_math.h"
#include "kernels/cpu/router_ref.h"
#include "kernels/cuda/ac_router.h"
#include "kernels/cuda/router.h"

namespace moe::kernels {
namespace {

Status check_logits(const Context& ctx, const char* op, const char* name, const TensorView& t) {
  MOE_RETURN_IF_ERROR(check_full(ctx, op, name, t));
  if (t.ndim() != 2) {
    return invalid_argument_error(op, ": ", name, " must be [T, E], got ", t.to_string());
  }
  return Status::OK();
}

// t has like's dtype (and device) and the given shape.
Status check_as(const char* op, const TensorView& like, const char* name, const TensorView& t,
                const Shape& shape) {
  MOE_RETURN_IF_ERROR(check_same_dtype(op, like, name, t));
  return check_shape(op, name, t, shape);
}

// The scaling is a finite positive number.
Status check_route_options(const char* op, const RouteOptions& opt) {
  if (!(std::isfinite(opt.scaling) && opt.scaling > 0)) {
    return invalid_argument_error(op, ": scaling = ", opt.scaling, " is not a finite number > 0");
  }
  return Status::OK();
}

// seq_counts is empty or [B, E] i64 with B dividing the rows.
Status check_seq_counts(const Context& ctx, const char* op, const TensorView& seq_counts,
                        int64_t rows, int64_t experts) {
  if (seq_counts.numel() == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(check_device(ctx, op, "seq_counts", seq_counts));
  MOE_RETURN_IF_ERROR(check_dtype(op, "seq_counts", seq_counts, DType::kI64));
  if (seq_counts.ndim() != 2 || seq_counts.dim(1) != experts || rows % seq_counts.dim(0) != 0) {
    return invalid_argument_error(op, ": seq_counts must be [B, ", experts, "] with B dividing ",
                                  rows, " tokens, got ", seq_counts.to_string());
  }
  return Status::OK();
}

// Inside a kernel: labels [T] in [0, E).
Status check_label_range(const char* op, const TensorView& labels, int64_t experts) {
  const int32_t* l = labels.data<int32_t>();
  const int64_t t = ref::first_label_outside(l, labels.numel(), experts);
  if (t >= 0) {
    return invalid_argument_error(op, ": label ", l[t], " of token ", t, " is outside [0, ",
                                  experts, ")");
  }
  return Status::OK();
}

// x [T, D] act, labels [T] i32, sums [E, D] f64, counts [E] i64 (the two AC statistics passes).
Status check_cluster_args(const Context& ctx, const char* op, const TensorView& x,
                          const TensorView& labels, const TensorView& sums,
                          const TensorView& counts) {
  MOE_RETURN_IF_ERROR(check_act(ctx, op, "x", x));
  if (x.ndim() != 2 || sums.ndim() != 2) {
    return invalid_argument_error(op, ": x must be [T, D] and sums [E, D]");
  }
  const int64_t experts = sums.dim(0);
  MOE_RETURN_IF_ERROR(check_tensor(ctx, op, "sums", sums, DType::kF64, Shape{experts, x.dim(1)}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, op, "counts", counts, DType::kI64, Shape{experts}));
  return check_tensor(ctx, op, "labels", labels, DType::kI32, Shape{x.dim(0)});
}

}  // namespace

Status topk_route(Context& ctx, const RouteOptions& opt, const TensorView& logits,
                  const TensorView& idx, const TensorView& gate, const TensorView& probs,
                  const TensorView& lse) {
  constexpr const char* kOp = "topk_route";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_logits(ctx, kOp, "logits", logits));
  const int64_t tokens = logits.dim(0), experts = logits.dim(1);
  const int64_t k = idx.ndim() == 2 ? idx.dim(1) : -1;
  if (k < 1 || k > experts) {
    return invalid_argument_error(kOp, ": top_k = ", k, " outside [1, ", experts, "]");
  }
  MOE_RETURN_IF_ERROR(check_route_options(kOp, opt));
  if (opt.groups < 1 || opt.groups > 64 || experts % opt.groups != 0 || opt.topk_groups < 1 ||
      opt.group_top < 1 || k > std::min(opt.topk_groups, opt.groups) * (experts / opt.groups)) {
    return invalid_argument_error(kOp, ": ", opt.groups, " groups keeping ", opt.topk_groups,
                                  " (scored by their ", opt.group_top,
                                  " best) cannot hold top_k = ", k, " of ", experts, " experts");
  }
  const TensorView& bias = opt.selection_bias;
  if (bias.numel() > 0) {
    MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "selection_bias", bias));
    MOE_RETURN_IF_ERROR(check_as(kOp, logits, "selection_bias", bias, Shape{experts}));
  }
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "idx", idx, DType::kI32, Shape{tokens, k}));
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "gate", gate, Shape{tokens, k}));
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "probs", probs, logits.shape()));
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "lse", lse, Shape{tokens}));
  MOE_ON_CUDA(ctx, cuda::topk_route(ctx, opt, logits, idx, gate, probs, lse));
  const ref::RouteParams p{opt.score, opt.renormalize, opt.scaling,     experts,
                           k,         opt.groups,      opt.topk_groups, opt.group_top};
  return dispatch_full(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    ref::topk_route<T>(p, logits.data<T>(), bias.numel() > 0 ? bias.data<T>() : nullptr, tokens,
                       idx.data<int32_t>(), gate.data<T>(), probs.data<T>(), lse.data<T>());
  });
}

Status topk_route_backward(Context& ctx, const RouteOptions& opt, const TensorView& logits,
                           const TensorView& d_gate, const TensorView& gate, const TensorView& idx,
                           const TensorView& d_logits) {
  constexpr const char* kOp = "topk_route_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_logits(ctx, kOp, "d_logits", d_logits));
  MOE_RETURN_IF_ERROR(check_full(ctx, kOp, "gate", gate));
  if (gate.ndim() != 2) return invalid_argument_error(kOp, ": gate must be [T, K]");
  MOE_RETURN_IF_ERROR(check_as(kOp, d_logits, "gate", gate, Shape{d_logits.dim(0), gate.dim(1)}));
  MOE_RETURN_IF_ERROR(check_as(kOp, d_logits, "d_gate", d_gate, gate.shape()));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "idx", idx, DType::kI32, gate.shape()));
  MOE_RETURN_IF_ERROR(check_route_options(kOp, opt));
  const bool gates_only = opt.score == ScoreFunction::kSoftmax && opt.renormalize;
  if (!gates_only || logits.numel() > 0) {
    MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "logits", logits));
    MOE_RETURN_IF_ERROR(check_as(kOp, d_logits, "logits", logits, d_logits.shape()));
  }
  MOE_ON_CUDA(ctx, cuda::topk_route_backward(ctx, opt, logits, d_gate, gate, idx, d_logits));
  const ref::RouteParams p{opt.score, opt.renormalize, opt.scaling, d_logits.dim(1), gate.dim(1)};
  return dispatch_full(kOp, d_gate, [&](auto tag) {
    using T = decltype(tag);
    ref::topk_route_backward<T>(p, logits.numel() > 0 ? logits.data<T>() : nullptr,
                                d_gate.data<T>(), gate.data<T>(), idx.data<int32_t>(),
                                d_logits.dim(0), d_logits.data<T>());
  });
}

Status topk_softmax(Context& ctx, const TensorView& logits, const TensorView& idx,
                    const TensorView& gate, const TensorView& probs, const TensorView& lse) {
  return topk_route(ctx, RouteOptions(), logits, idx, gate, probs, lse);
}

Status topk_softmax_backward(Context& ctx, const TensorView& d_gate, const TensorView& gate,
                             const TensorView& idx, const TensorView& d_logits) {
  return topk_route_backward(ctx, RouteOptions(), TensorView(), d_gate, gate, idx, d_logits);
}

Status sequence_counts(Context& ctx, const TensorView& idx, const TensorView& counts) {
  constexpr const char* kOp = "sequence_counts";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "idx", idx));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "idx", idx, DType::kI32));
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "counts", counts));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "counts", counts, DType::kI64));
  if (idx.ndim() != 2 || counts.ndim() != 2) {
    return invalid_argument_error(kOp, ": idx must be [T, K] and counts [B, E], got ",
                                  idx.to_string(), " and ", counts.to_string());
  }
  const int64_t tokens = idx.dim(0), sequences = counts.dim(0);
  if (sequences < 1 || tokens % sequences != 0) {
    return invalid_argument_error(kOp, ": ", tokens, " tokens are not ", sequences,
                                  " sequences of equal length");
  }
  MOE_ON_CUDA(ctx, cuda::sequence_counts(ctx, idx, counts));
  ref::sequence_counts(idx.data<int32_t>(), tokens, idx.dim(1), sequences, counts.dim(1),
                       counts.data<int64_t>());
  return Status::OK();
}

Status sparsemixer_route(Context& ctx, const SparseMixerRouteArgs& args, const TensorView& logits,
                         const SparseMixerRouteOut& out) {
  const TensorView &idx = out.idx, &gate = out.gate, &probs = out.probs, &lse = out.lse;
  const TensorView &mask = out.mask, &scale = out.scale, &is_argmax = out.is_argmax;
  constexpr const char* kOp = "sparsemixer_route";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_logits(ctx, kOp, "logits", logits));
  const int64_t tokens = logits.dim(0), experts = logits.dim(1);
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "idx", idx, DType::kI32, Shape{tokens, 1}));
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "gate", gate, Shape{tokens, 1}));
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "probs", probs, logits.shape()));
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "lse", lse, Shape{tokens}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "mask", mask, DType::kU8, logits.shape()));
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "scale", scale, Shape{tokens}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "is_argmax", is_argmax, DType::kU8, Shape{tokens}));
  MOE_ON_CUDA(ctx, cuda::sparsemixer_route(ctx, args, logits,
                                           {idx, gate, probs, lse, mask, scale, is_argmax}));
  return dispatch_full(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    ref::SparseMixerOutputs<T> o;
    o.idx = idx.data<int32_t>();
    o.gate = gate.data<T>();
    o.probs = probs.data<T>();
    o.lse = lse.data<T>();
    o.mask = mask.data<uint8_t>();
    o.scale = scale.data<T>();
    o.is_argmax = is_argmax.data<uint8_t>();
    // A step in device memory (args.rng.device_step) is host memory here: read now.
    ref::sparsemixer_route<T>(args.params, args.training, args.rng.at_step(),
                              args.token_offset + args.rng.key_shift(), logits.data<T>(), tokens,
                              experts, o);
  });
}

Status sparsemixer_backward(Context& ctx, SparseMixerGateGrad rule, const TensorView& d_gate,
                            const TensorView& idx, const TensorView& probs, const TensorView& mask,
                            const TensorView& scale, const TensorView& d_logits) {
  constexpr const char* kOp = "sparsemixer_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_logits(ctx, kOp, "probs", probs));
  const int64_t tokens = probs.dim(0);
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "idx", idx, DType::kI32, Shape{tokens, 1}));
  MOE_RETURN_IF_ERROR(check_as(kOp, probs, "d_gate", d_gate, Shape{tokens, 1}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "mask", mask, DType::kU8, probs.shape()));
  MOE_RETURN_IF_ERROR(check_as(kOp, probs, "scale", scale, Shape{tokens}));
  MOE_RETURN_IF_ERROR(check_as(kOp, probs, "d_logits", d_logits, probs.shape()));
  MOE_ON_CUDA(ctx,
              cuda::sparsemixer_backward(ctx, rule, d_gate, idx, probs, mask, scale, d_logits));
  return dispatch_full(kOp, probs, [&](auto tag) {
    using T = decltype(tag);
    const ref::SparseMixerSaved<T> saved{idx.data<int32_t>(), probs.data<T>(), mask.data<uint8_t>(),
                                         scale.data<T>()};
    ref::sparsemixer_backward<T>(rule, d_gate.data<T>(), saved, tokens, probs.dim(1),
                                 d_logits.data<T>());
  });
}

Status aux_sums(Context& ctx, const TensorView& probs, const TensorView& lse,
                const TensorView& load, const TensorView& seq_counts, int64_t tokens,
                const TensorView& packed) {
  constexpr const char* kOp = "aux_sums";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_logits(ctx, kOp, "probs", probs));
  const int64_t rows = probs.dim(0), experts = probs.dim(1);
  MOE_RETURN_IF_ERROR(check_as(kOp, probs, "lse", lse, Shape{rows}));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "load", load, DType::kI64, Shape{experts}));
  MOE_RETURN_IF_ERROR(check_seq_counts(ctx, kOp, seq_counts, rows, experts));
  MOE_RETURN_IF_ERROR(
      check_tensor(ctx, kOp, "packed", packed, DType::kF64, Shape{aux_packed_size(experts)}));
  MOE_ON_CUDA(ctx, cuda::aux_sums(ctx, probs, lse, load, seq_counts, tokens, packed));
  return dispatch_full(kOp, probs, [&](auto tag) {
    using T = decltype(tag);
    ref::aux_sums<T>(probs.data<T>(), lse.data<T>(), load.data<int64_t>(), rows, experts, tokens,
                     packed.data<double>());
    if (seq_counts.numel() > 0) {
      ref::aux_sequence_sums<T>(probs.data<T>(), seq_counts.data<int64_t>(), rows, experts,
                                seq_counts.dim(0), packed.data<double>());
    }
  });
}

Status aux_losses(Context& ctx, const TensorView& packed, const AuxLossWeights& w,
                  const TensorView& losses) {
  constexpr const char* kOp = "aux_losses";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "packed", packed));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "packed", packed, DType::kF64));
  if (packed.ndim() != 1 || packed.numel() < aux_packed_size(1) || packed.numel() % 3 != 0) {
    return invalid_argument_error(kOp, ": packed must be [3E + 3], got ", packed.to_string());
  }
  if (w.top_k < 1) return invalid_argument_error(kOp, ": top_k = ", w.top_k, " is not >= 1");
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "losses", losses, DType::kF64, Shape{kAuxLossesSize}));
  MOE_ON_CUDA(ctx, cuda::aux_losses(ctx, packed, w, losses));
  const int64_t experts = (packed.numel() - 3) / 3;
  ref::aux_losses_from_packed(packed.data<double>(), experts, w.top_k, w.balance, w.z, w.seq,
                              losses.data<double>());
  return Status::OK();
}

Status aux_losses_backward(Context& ctx, const TensorView& logits, const TensorView& probs,
                           const TensorView& packed, const TensorView& lse,
                           const TensorView& seq_counts, const AuxLossWeights& w,
                           const TensorView& d_logits) {
  constexpr const char* kOp = "aux_losses_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_logits(ctx, kOp, "logits", logits));
  const int64_t local = logits.dim(0), experts = logits.dim(1);
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "probs", probs, logits.shape()));
  MOE_RETURN_IF_ERROR(
      check_tensor(ctx, kOp, "packed", packed, DType::kF64, Shape{aux_packed_size(experts)}));
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "lse", lse, Shape{local}));
  MOE_RETURN_IF_ERROR(check_seq_counts(ctx, kOp, seq_counts, local, experts));
  MOE_RETURN_IF_ERROR(check_as(kOp, logits, "d_logits", d_logits, logits.shape()));
  if (w.top_k < 1) return invalid_argument_error(kOp, ": top_k = ", w.top_k, " is not >= 1");
  MOE_ON_CUDA(ctx,
              cuda::aux_losses_backward(ctx, logits, probs, packed, lse, seq_counts, w, d_logits));
  return dispatch_full(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    const double* v = packed.data<double>();
    const bool seq = seq_counts.numel() > 0;
    const ref::AuxGradArgs a = ref::aux_grad_args(
        v, experts, {w.top_k, w.balance, w.z, w.seq, w.score}, seq ? local / seq_counts.dim(0) : 0);
    ref::aux_losses_backward<T>(logits.data<T>(), probs.data<T>(), v, lse.data<T>(),
                                seq ? seq_counts.data<int64_t>() : nullptr, local, a,
                                d_logits.data<T>());
  });
}

Status ac_cluster_sums(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& sums, const TensorView& counts) {
  constexpr const char* kOp = "ac_cluster_sums";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_cluster_args(ctx, kOp, x, labels, sums, counts));
  const int64_t experts = sums.dim(0);
  MOE_ON_CUDA(ctx, cuda::ac_cluster_sums(ctx, x, labels, sums, counts));
  MOE_RETURN_IF_ERROR(check_label_range(kOp, labels, experts));
  return dispatch_float(kOp, x, [&](auto tag) {
    using A = decltype(tag);
    ref::ac_cluster_sums<A>(x.data<A>(), labels.data<int32_t>(), x.dim(0), x.dim(1), experts,
                            sums.data<double>(), counts.data<int64_t>());
  });
}

Status ac_cluster_abs_dev(Context& ctx, const TensorView& x, const TensorView& labels,
                          const TensorView& sums, const TensorView& counts,
                          const TensorView& abs_dev) {
  constexpr const char* kOp = "ac_cluster_abs_dev";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_cluster_args(ctx, kOp, x, labels, sums, counts));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "abs_dev", abs_dev, DType::kF64, sums.shape()));
  const int64_t experts = sums.dim(0);
  MOE_ON_CUDA(ctx, cuda::ac_cluster_abs_dev(ctx, x, labels, sums, counts, abs_dev));
  MOE_RETURN_IF_ERROR(check_label_range(kOp, labels, experts));
  return dispatch_float(kOp, x, [&](auto tag) {
    using A = decltype(tag);
    ref::ac_cluster_abs_dev<A>(x.data<A>(), labels.data<int32_t>(), x.dim(0), x.dim(1), experts,
                               sums.data<double>(), counts.data<int64_t>(), abs_dev.data<double>());
  });
}

Status ac_metric(Context& ctx, const AcRouterParams& params, const TensorView& abs_dev,
                 const TensorView& counts, const TensorView& metric, const TensorView& summary) {
  constexpr const char* kOp = "ac_metric";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "abs_dev", abs_dev));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "abs_dev", abs_dev, DType::kF64));
  if (abs_dev.ndim() != 2) return invalid_argument_error(kOp, ": abs_dev must be [E, D]");
  const int64_t experts = abs_dev.dim(0), d = abs_dev.dim(1);
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "counts", counts, DType::kI64, Shape{experts}));
  MOE_RETURN_IF_ERROR(check_full(ctx, kOp, "metric", metric));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "metric", metric, abs_dev.shape()));
  MOE_RETURN_IF_ERROR(
      check_tensor(ctx, kOp, "summary", summary, DType::kF64, Shape{kAcSummarySize}));
  MOE_ON_CUDA(ctx, cuda::ac_metric(ctx, params, abs_dev, counts, metric, summary));
  return dispatch_full(kOp, metric, [&](auto tag) {
    using T = decltype(tag);
    ref::ac_metric_typed<T>(params, abs_dev.data<double>(), counts.data<int64_t>(), experts, d,
                            metric.data<T>(), summary.data<double>());
  });
}

Status ac_apply_metric(Context& ctx, const TensorView& x, const TensorView& labels,
                       const TensorView& metric, const TensorView& out) {
  constexpr const char* kOp = "ac_apply_metric";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "x", x));
  if (x.ndim() != 2 || metric.ndim() != 2 || metric.dim(1) != x.dim(1)) {
    return invalid_argument_error(kOp, ": x must be [T, D] and metric [E, D]");
  }
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "metric", metric));
  MOE_RETURN_IF_ERROR(check_compute(kOp, "metric", metric, x.dtype(), metric.shape()));
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "out", out));
  MOE_RETURN_IF_ERROR(check_compute(kOp, "out", out, x.dtype(), x.shape()));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "labels", labels, DType::kI32, Shape{x.dim(0)}));
  MOE_ON_CUDA(ctx, cuda::ac_apply_metric(ctx, x, labels, metric, out));
  MOE_RETURN_IF_ERROR(check_label_range(kOp, labels, metric.dim(0)));
  return dispatch_act(kOp, x, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::ac_apply_metric<A, F>(x.data<A>(), labels.data<int32_t>(), metric.data<F>(), x.dim(0),
                               x.dim(1), out.data<F>());
  });
}

Status ac_apply_metric_backward(Context& ctx, const TensorView& d_out, const TensorView& labels,
                                const TensorView& metric, const TensorView& dx) {
  constexpr const char* kOp = "ac_apply_metric_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_act(ctx, kOp, "dx", dx));
  if (dx.ndim() != 2 || metric.ndim() != 2 || metric.dim(1) != dx.dim(1)) {
    return invalid_argument_error(kOp, ": dx must be [T, D] and metric [E, D]");
  }
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "metric", metric));
  MOE_RETURN_IF_ERROR(check_compute(kOp, "metric", metric, dx.dtype(), metric.shape()));
  MOE_RETURN_IF_ERROR(check_device(ctx, kOp, "d_out", d_out));
  MOE_RETURN_IF_ERROR(check_compute(kOp, "d_out", d_out, dx.dtype(), dx.shape()));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "labels", labels, DType::kI32, Shape{dx.dim(0)}));
  MOE_ON_CUDA(ctx, cuda::ac_apply_metric_backward(ctx, d_out, labels, metric, dx));
  MOE_RETURN_IF_ERROR(check_label_range(kOp, labels, metric.dim(0)));
  return dispatch_act(kOp, dx, [&](auto at, auto ft) {
    using A = decltype(at);
    using F = decltype(ft);
    ref::ac_apply_metric_backward<A, F>(d_out.data<F>(), labels.data<int32_t>(), metric.data<F>(),
                                        dx.dim(0), dx.dim(1), dx.data<A>());
  });
}

Status normalize_columns(Context& ctx, const TensorView& w, const TensorView& out,
                         const TensorView& inv_norm) {
  constexpr const char* kOp = "normalize_columns";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_logits(ctx, kOp, "w", w));
  MOE_RETURN_IF_ERROR(check_as(kOp, w, "out", out, w.shape()));
  MOE_RETURN_IF_ERROR(check_as(kOp, w, "inv_norm", inv_norm, Shape{w.dim(1)}));
  MOE_ON_CUDA(ctx, cuda::normalize_columns(ctx, w, out, inv_norm));
  return dispatch_full(kOp, w, [&](auto tag) {
    using T = decltype(tag);
    ref::normalize_columns<T>(w.data<T>(), w.dim(0), w.dim(1), out.data<T>(), inv_norm.data<T>());
  });
}

Status normalize_columns_backward(Context& ctx, const TensorView& d_out, const TensorView& out,
                                  const TensorView& inv_norm, const TensorView& dw) {
  constexpr const char* kOp = "normalize_columns_backward";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_logits(ctx, kOp, "out", out));
  MOE_RETURN_IF_ERROR(check_as(kOp, out, "d_out", d_out, out.shape()));
  MOE_RETURN_IF_ERROR(check_as(kOp, out, "dw", dw, out.shape()));
  MOE_RETURN_IF_ERROR(check_as(kOp, out, "inv_norm", inv_norm, Shape{out.dim(1)}));
  MOE_ON_CUDA(ctx, cuda::normalize_columns_backward(ctx, d_out, out, inv_norm, dw));
  return dispatch_full(kOp, out, [&](auto tag) {
    using T = decltype(tag);
    ref::normalize_columns_backward<T>(d_out.data<T>(), out.data<T>(), inv_norm.data<T>(),
                                       out.dim(0), out.dim(1), dw.data<T>());
  });
}

Status argmax_rows(Context& ctx, const TensorView& logits, const TensorView& top1) {
  constexpr const char* kOp = "argmax_rows";
  MOE_KERNEL_ENTRY_CUDA(ctx, kOp);
  MOE_RETURN_IF_ERROR(check_logits(ctx, kOp, "logits", logits));
  MOE_RETURN_IF_ERROR(check_tensor(ctx, kOp, "top1", top1, DType::kI32, Shape{logits.dim(0)}));
  MOE_ON_CUDA(ctx, cuda::argmax_rows(ctx, logits, top1));
  return dispatch_full(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    ref::argmax_rows<T>(logits.data<T>(), logits.dim(0), logits.dim(1), top1.data<int32_t>());
  });
}

}  // namespace moe::kernels
