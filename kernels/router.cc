#include "kernels/router.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common.h"
#include "kernels/reference/router_ref.h"

namespace moe::kernels {
namespace {

Status check_router_shapes(const char* op, const TensorView& logits, const TensorView& idx,
                           int64_t k) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "logits", logits));
  if (logits.ndim() != 2) {
    return invalid_argument_error(op, ": logits must be [T, E], got ", logits.to_string());
  }
  MOE_RETURN_IF_ERROR(check_dtype(op, "idx", idx, DType::kI32));
  return check_shape(op, "idx", idx, Shape{logits.dim(0), k});
}

Status check_labels(const char* op, const TensorView& labels, int64_t tokens, int64_t experts) {
  MOE_RETURN_IF_ERROR(check_dtype(op, "labels", labels, DType::kI32));
  MOE_RETURN_IF_ERROR(check_shape(op, "labels", labels, Shape{tokens}));
  const int32_t* l = labels.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    if (l[t] < 0 || l[t] >= experts) {
      return invalid_argument_error(op, ": label ", l[t], " of token ", t, " is outside [0, ",
                                    experts, ")");
    }
  }
  return Status::OK();
}

// The arguments the two AC statistics passes share: x [T, D] float, sums [E, D] f64, counts
// [E] i64, labels [T] i32 in [0, E).
Status check_cluster_args(const char* op, const TensorView& x, const TensorView& labels,
                          const TensorView& sums, const TensorView& counts) {
  MOE_RETURN_IF_ERROR(check_host_float(op, "x", x));
  if (x.ndim() != 2 || sums.ndim() != 2) {
    return invalid_argument_error(op, ": x must be [T, D] and sums [E, D]");
  }
  const int64_t experts = sums.dim(0);
  MOE_RETURN_IF_ERROR(check_dtype(op, "sums", sums, DType::kF64));
  MOE_RETURN_IF_ERROR(check_shape(op, "sums", sums, Shape{experts, x.dim(1)}));
  MOE_RETURN_IF_ERROR(check_dtype(op, "counts", counts, DType::kI64));
  MOE_RETURN_IF_ERROR(check_shape(op, "counts", counts, Shape{experts}));
  return check_labels(op, labels, x.dim(0), experts);
}

}  // namespace

Status topk_softmax(const TensorView& logits, const TensorView& idx, const TensorView& gate,
                    const TensorView& probs, const TensorView& lse, Stream stream) {
  constexpr const char* kOp = "topk_softmax";
  const int64_t k = idx.ndim() == 2 ? idx.dim(1) : -1;
  MOE_RETURN_IF_ERROR(check_router_shapes(kOp, logits, idx, k));
  const int64_t tokens = logits.dim(0), experts = logits.dim(1);
  if (k < 1 || k > experts) {
    return invalid_argument_error(kOp, ": top_k = ", k, " outside [1, ", experts, "]");
  }
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "gate", gate));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "gate", gate, Shape{tokens, k}));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "probs", probs));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "probs", probs, logits.shape()));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "lse", lse));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "lse", lse, Shape{tokens}));
  return dispatch_host_float(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    ref::topk_softmax<T>(logits.data<T>(), tokens, experts, k, idx.data<int32_t>(),
                         gate.data<T>(), probs.data<T>(), lse.data<T>());
  });
}

Status topk_softmax_backward(const TensorView& d_gate, const TensorView& gate,
                             const TensorView& idx, const TensorView& d_logits, Stream stream) {
  constexpr const char* kOp = "topk_softmax_backward";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "d_gate", d_gate));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, d_gate, "gate", gate));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, d_gate, "d_logits", d_logits));
  if (d_logits.ndim() != 2) return invalid_argument_error(kOp, ": d_logits must be [T, E]");
  MOE_RETURN_IF_ERROR(check_router_shapes(kOp, d_logits, idx, gate.dim(-1)));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_gate", d_gate, gate.shape()));
  return dispatch_host_float(kOp, d_gate, [&](auto tag) {
    using T = decltype(tag);
    ref::topk_softmax_backward<T>(d_gate.data<T>(), gate.data<T>(), idx.data<int32_t>(),
                                  d_logits.dim(0), d_logits.dim(1), gate.dim(1),
                                  d_logits.data<T>());
  });
}

Status sparsemixer_route(const SparseMixerRouteArgs& args, const TensorView& logits,
                         const TensorView& idx, const TensorView& gate, const TensorView& probs,
                         const TensorView& lse, const TensorView& mask, const TensorView& scale,
                         const TensorView& is_argmax, Stream stream) {
  constexpr const char* kOp = "sparsemixer_route";
  MOE_RETURN_IF_ERROR(check_router_shapes(kOp, logits, idx, 1));
  const int64_t tokens = logits.dim(0), experts = logits.dim(1);
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "gate", gate));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "gate", gate, Shape{tokens, 1}));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "probs", probs));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "probs", probs, logits.shape()));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "lse", lse));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "lse", lse, Shape{tokens}));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "mask", mask, DType::kU8));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "mask", mask, logits.shape()));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "scale", scale));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "scale", scale, Shape{tokens}));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "is_argmax", is_argmax, DType::kU8));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "is_argmax", is_argmax, Shape{tokens}));
  return dispatch_host_float(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    ref::sparsemixer_route<T>(args.params, args.training, args.rng, args.token_offset,
                              logits.data<T>(), tokens, experts, idx.data<int32_t>(),
                              gate.data<T>(), probs.data<T>(), lse.data<T>(),
                              mask.data<uint8_t>(), scale.data<T>(), is_argmax.data<uint8_t>());
  });
}

Status sparsemixer_backward(SparseMixerGateGrad rule, const TensorView& d_gate,
                            const TensorView& idx, const TensorView& probs,
                            const TensorView& mask, const TensorView& scale,
                            const TensorView& d_logits, Stream stream) {
  constexpr const char* kOp = "sparsemixer_backward";
  MOE_RETURN_IF_ERROR(check_router_shapes(kOp, probs, idx, 1));
  const int64_t tokens = probs.dim(0);
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, probs, "d_gate", d_gate));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_gate", d_gate, Shape{tokens, 1}));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "mask", mask, DType::kU8));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "mask", mask, probs.shape()));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, probs, "scale", scale));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "scale", scale, Shape{tokens}));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, probs, "d_logits", d_logits));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_logits", d_logits, probs.shape()));
  return dispatch_host_float(kOp, probs, [&](auto tag) {
    using T = decltype(tag);
    ref::sparsemixer_backward<T>(rule, d_gate.data<T>(), idx.data<int32_t>(), probs.data<T>(),
                                 mask.data<uint8_t>(), scale.data<T>(), tokens, probs.dim(1),
                                 d_logits.data<T>());
  });
}

Status assign_capacity(const TensorView& idx, int64_t num_experts, int64_t capacity,
                       const TensorView& slot, const TensorView& load, const TensorView& kept,
                       Stream stream) {
  constexpr const char* kOp = "assign_capacity";
  if (!idx.is_host()) return unsupported_device(kOp, idx);
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "idx", idx, DType::kI32));
  if (idx.ndim() != 2) return invalid_argument_error(kOp, ": idx must be [T, K]");
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "slot", slot, DType::kI32));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "slot", slot, idx.shape()));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "load", load, DType::kI64));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "load", load, Shape{num_experts}));
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "kept", kept, DType::kI64));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "kept", kept, Shape{num_experts}));
  const int32_t* p = idx.data<int32_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (p[i] < 0 || p[i] >= num_experts) {
      return invalid_argument_error(kOp, ": expert index ", p[i], " outside [0, ", num_experts,
                                    ")");
    }
  }
  ref::assign_capacity(p, idx.dim(0), idx.dim(1), num_experts, capacity, slot.data<int32_t>(),
                       load.data<int64_t>(), kept.data<int64_t>());
  return Status::OK();
}

StatusOr<AuxSums> aux_sums(const TensorView& probs, const TensorView& lse) {
  constexpr const char* kOp = "aux_sums";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "probs", probs));
  if (probs.ndim() != 2) return invalid_argument_error(kOp, ": probs must be [T, E]");
  const int64_t tokens = probs.dim(0), experts = probs.dim(1);
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, probs, "lse", lse));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "lse", lse, Shape{tokens}));
  AuxSums out;
  out.prob_sum.assign(experts, 0.0);
  MOE_RETURN_IF_ERROR(dispatch_host_float(kOp, probs, [&](auto tag) {
    using T = decltype(tag);
    const T* p = probs.data<T>();
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t e = 0; e < experts; ++e) out.prob_sum[e] += p[t * experts + e];
    const T* z = lse.data<T>();
    for (int64_t t = 0; t < tokens; ++t) out.lse_sq_sum += static_cast<double>(z[t]) * z[t];
  }));
  return out;
}

AuxLosses aux_losses(const AuxSums& sums, const std::vector<int64_t>& load, int64_t tokens,
                     int64_t top_k) {
  AuxLosses out;
  if (tokens <= 0) return out;
  const double t = static_cast<double>(tokens);
  const double slots = t * static_cast<double>(top_k);
  for (size_t e = 0; e < load.size(); ++e) out.balance += (load[e] / slots) * (sums.prob_sum[e] / t);
  out.balance *= static_cast<double>(load.size());
  out.z = sums.lse_sq_sum / t;
  return out;
}

Status aux_losses_backward(const TensorView& logits, const TensorView& probs,
                           const std::vector<int64_t>& load, int64_t tokens,
                           const TensorView& lse, int64_t top_k, double balance_weight,
                           double z_weight, const TensorView& d_logits, Stream stream) {
  constexpr const char* kOp = "aux_losses_backward";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "logits", logits));
  if (logits.ndim() != 2) return invalid_argument_error(kOp, ": logits must be [T, E]");
  const int64_t local = logits.dim(0), experts = logits.dim(1);
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "probs", probs));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "probs", probs, logits.shape()));
  if (static_cast<int64_t>(load.size()) != experts) {
    return invalid_argument_error(kOp, ": load has ", load.size(), " entries, expected ", experts);
  }
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "lse", lse));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "lse", lse, Shape{local}));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, logits, "d_logits", d_logits));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "d_logits", d_logits, logits.shape()));
  return dispatch_host_float(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    ref::aux_losses_backward<T>(logits.data<T>(), probs.data<T>(), load.data(), lse.data<T>(),
                                local, tokens, experts, top_k, balance_weight, z_weight,
                                d_logits.data<T>());
  });
}

Status ac_cluster_sums(const TensorView& x, const TensorView& labels, const TensorView& sums,
                       const TensorView& counts, Stream stream) {
  constexpr const char* kOp = "ac_cluster_sums";
  MOE_RETURN_IF_ERROR(check_cluster_args(kOp, x, labels, sums, counts));
  const int64_t experts = sums.dim(0);
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::ac_cluster_sums<T>(x.data<T>(), labels.data<int32_t>(), x.dim(0), x.dim(1), experts,
                            sums.data<double>(), counts.data<int64_t>());
  });
}

Status ac_cluster_abs_dev(const TensorView& x, const TensorView& labels, const TensorView& sums,
                          const TensorView& counts, const TensorView& abs_dev, Stream stream) {
  constexpr const char* kOp = "ac_cluster_abs_dev";
  MOE_RETURN_IF_ERROR(check_cluster_args(kOp, x, labels, sums, counts));
  const int64_t experts = sums.dim(0);
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "abs_dev", abs_dev, DType::kF64));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "abs_dev", abs_dev, sums.shape()));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::ac_cluster_abs_dev<T>(x.data<T>(), labels.data<int32_t>(), x.dim(0), x.dim(1), experts,
                               sums.data<double>(), counts.data<int64_t>(),
                               abs_dev.data<double>());
  });
}

StatusOr<AcMetricSummary> ac_metric(const AcRouterParams& params, const TensorView& abs_dev,
                                    const TensorView& counts, const TensorView& metric) {
  constexpr const char* kOp = "ac_metric";
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "abs_dev", abs_dev, DType::kF64));
  if (abs_dev.ndim() != 2) return invalid_argument_error(kOp, ": abs_dev must be [E, D]");
  const int64_t experts = abs_dev.dim(0), d = abs_dev.dim(1);
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "counts", counts, DType::kI64));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "counts", counts, Shape{experts}));
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "metric", metric));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "metric", metric, abs_dev.shape()));

  const double* dev = abs_dev.data<double>();
  const int64_t* n = counts.data<int64_t>();
  std::vector<double> w(experts * d, 1.0);
  std::vector<uint8_t> active(experts, 0);
  AcMetricSummary summary;
  for (int64_t k = 0; k < experts; ++k) {
    active[k] = n[k] >= params.min_cluster_size;
    summary.tiny_clusters += !active[k];
    if (!active[k]) continue;
    for (int64_t q = 0; q < d; ++q) {
      const double mad = n[k] > 0 ? dev[k * d + q] / static_cast<double>(n[k]) : 0.0;
      w[k * d + q] = 1.0 / (mad + params.eps);
    }
  }
  if (params.normalization == AcNormalization::kPaper) {
    // Lemma 1 (Eq. 21): each active cluster's weights have mean 1 over the D features.
    for (int64_t k = 0; k < experts; ++k) {
      if (!active[k]) continue;
      double sum = 0;
      for (int64_t q = 0; q < d; ++q) sum += w[k * d + q];
      for (int64_t q = 0; q < d; ++q) w[k * d + q] *= static_cast<double>(d) / sum;
    }
  } else {
    // Reference code: clip at clip_mult x the global mean, then each feature has mean 1 over the
    // active clusters.
    double mean = 0;
    int64_t active_count = 0;
    for (int64_t k = 0; k < experts; ++k) {
      if (!active[k]) continue;
      ++active_count;
      for (int64_t q = 0; q < d; ++q) mean += w[k * d + q];
    }
    if (active_count > 0) {
      mean /= static_cast<double>(active_count * d);
      const double cap = params.clip_mult * mean;
      int64_t clipped = 0;
      for (int64_t k = 0; k < experts; ++k) {
        if (!active[k]) continue;
        for (int64_t q = 0; q < d; ++q) {
          if (w[k * d + q] > cap) {
            w[k * d + q] = cap;
            ++clipped;
          }
        }
      }
      summary.clipped_fraction = static_cast<double>(clipped) / static_cast<double>(active_count * d);
      for (int64_t q = 0; q < d; ++q) {
        double col = 0;
        for (int64_t k = 0; k < experts; ++k)
          if (active[k]) col += w[k * d + q];
        col /= static_cast<double>(active_count);
        for (int64_t k = 0; k < experts; ++k)
          if (active[k]) w[k * d + q] /= col;
      }
    }
  }
  summary.min = std::numeric_limits<double>::infinity();
  summary.max = -std::numeric_limits<double>::infinity();
  for (double v : w) {
    summary.min = std::min(summary.min, v);
    summary.max = std::max(summary.max, v);
    summary.mean += v;
  }
  summary.mean /= static_cast<double>(std::max<int64_t>(1, experts * d));
  Status s = dispatch_host_float(kOp, metric, [&](auto tag) {
    using T = decltype(tag);
    T* m = metric.data<T>();
    for (int64_t i = 0; i < experts * d; ++i) m[i] = static_cast<T>(w[i]);
  });
  MOE_RETURN_IF_ERROR(s);
  return summary;
}

Status ac_apply_metric(const TensorView& x, const TensorView& labels, const TensorView& metric,
                       const TensorView& out, Stream stream) {
  constexpr const char* kOp = "ac_apply_metric";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "metric", metric));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, x, "out", out));
  if (x.ndim() != 2 || metric.ndim() != 2 || metric.dim(1) != x.dim(1)) {
    return invalid_argument_error(kOp, ": x must be [T, D] and metric [E, D]");
  }
  MOE_RETURN_IF_ERROR(check_shape(kOp, "out", out, x.shape()));
  MOE_RETURN_IF_ERROR(check_labels(kOp, labels, x.dim(0), metric.dim(0)));
  return dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    ref::ac_apply_metric<T>(x.data<T>(), labels.data<int32_t>(), metric.data<T>(), x.dim(0),
                            x.dim(1), out.data<T>(), false);
  });
}

Status ac_apply_metric_backward(const TensorView& d_out, const TensorView& labels,
                                const TensorView& metric, const TensorView& dx, Stream stream) {
  constexpr const char* kOp = "ac_apply_metric_backward";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "d_out", d_out));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, d_out, "metric", metric));
  MOE_RETURN_IF_ERROR(check_same_dtype(kOp, d_out, "dx", dx));
  if (d_out.ndim() != 2 || metric.ndim() != 2 || metric.dim(1) != d_out.dim(1)) {
    return invalid_argument_error(kOp, ": d_out must be [T, D] and metric [E, D]");
  }
  MOE_RETURN_IF_ERROR(check_shape(kOp, "dx", dx, d_out.shape()));
  MOE_RETURN_IF_ERROR(check_labels(kOp, labels, d_out.dim(0), metric.dim(0)));
  return dispatch_host_float(kOp, d_out, [&](auto tag) {
    using T = decltype(tag);
    ref::ac_apply_metric<T>(d_out.data<T>(), labels.data<int32_t>(), metric.data<T>(),
                            d_out.dim(0), d_out.dim(1), dx.data<T>(), true);
  });
}

Status argmax_rows(const TensorView& logits, const TensorView& top1, Stream stream) {
  constexpr const char* kOp = "argmax_rows";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "logits", logits));
  if (logits.ndim() != 2) return invalid_argument_error(kOp, ": logits must be [T, E]");
  MOE_RETURN_IF_ERROR(check_dtype(kOp, "top1", top1, DType::kI32));
  MOE_RETURN_IF_ERROR(check_shape(kOp, "top1", top1, Shape{logits.dim(0)}));
  return dispatch_host_float(kOp, logits, [&](auto tag) {
    using T = decltype(tag);
    const int64_t experts = logits.dim(1);
    const T* p = logits.data<T>();
    int32_t* out = top1.data<int32_t>();
    for (int64_t t = 0; t < logits.dim(0); ++t) {
      int64_t best = 0;
      for (int64_t e = 1; e < experts; ++e)
        if (p[t * experts + e] > p[t * experts + best]) best = e;
      out[t] = static_cast<int32_t>(best);
    }
  });
}

StatusOr<double> entropy_sum(const TensorView& probs) {
  constexpr const char* kOp = "entropy_sum";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "probs", probs));
  if (probs.ndim() != 2) return invalid_argument_error(kOp, ": probs must be [T, E]");
  double h = 0;
  MOE_RETURN_IF_ERROR(dispatch_host_float(kOp, probs, [&](auto tag) {
    using T = decltype(tag);
    const T* p = probs.data<T>();
    for (int64_t i = 0; i < probs.numel(); ++i)
      if (p[i] > T(0)) h -= static_cast<double>(p[i]) * std::log(static_cast<double>(p[i]));
  }));
  return h;
}

StatusOr<double> row_norm_sum(const TensorView& x) {
  constexpr const char* kOp = "row_norm_sum";
  MOE_RETURN_IF_ERROR(check_host_float(kOp, "x", x));
  if (x.ndim() != 2) return invalid_argument_error(kOp, ": x must be [T, D]");
  double total = 0;
  MOE_RETURN_IF_ERROR(dispatch_host_float(kOp, x, [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    const int64_t d = x.dim(1);
    for (int64_t t = 0; t < x.dim(0); ++t) {
      double sq = 0;
      for (int64_t q = 0; q < d; ++q) sq += static_cast<double>(p[t * d + q]) * p[t * d + q];
      total += std::sqrt(sq);
    }
  }));
  return total;
}

}  // namespace moe::kernels
