#include "core/layers/moe_router.h"

#include <algorithm>
#include <cmath>

#include "kernels/activation.h"
#include "kernels/common.h"
#include "kernels/gemm.h"
#include "kernels/router.h"

namespace moe {
namespace {

Status add_row_bias(const TensorView& x, const TensorView& bias) {
  return kernels::add_bias_grouped(x, bias.reshape({1, bias.numel()}), {0, x.dim(0)});
}

}  // namespace

MoeRouter::MoeRouter(const std::string& prefix, const MoeLayerConfig& cfg, ParameterSet* params)
    : cfg_(cfg) {
  w_ = &params->add(prefix + ".w_router", {cfg.d_model, cfg.num_experts});
  b_ = &params->add(prefix + ".b_router", {cfg.num_experts}, ParamKind::kDense, false);
}

Status MoeRouter::compute_ac_metric(const RouterForwardArgs& args, RouterSaved* saved,
                                    RouterStatsInfo* stats) {
  const int64_t experts = cfg_.num_experts, d = cfg_.d_model;
  const int64_t tokens = args.y.dim(0);
  Tensor sums = Tensor::empty({experts, d}, DType::kF64);
  Tensor counts = Tensor::empty({experts}, DType::kI64);
  Tensor abs_dev = Tensor::empty({experts, d}, DType::kF64);
  saved->labels = Tensor::copy_of(args.prev_top1);
  MOE_RETURN_IF_ERROR(kernels::ac_cluster_sums(args.y, saved->labels, sums, counts));
  comm::Communicator* comm = cfg_.ac.global_stats ? args.stats_comm : nullptr;
  if (comm != nullptr) {
    MOE_RETURN_IF_ERROR(comm->all_reduce(sums, sums, comm::ReduceOp::kSum));
    MOE_RETURN_IF_ERROR(comm->all_reduce(counts, counts, comm::ReduceOp::kSum));
  }
  MOE_RETURN_IF_ERROR(kernels::ac_cluster_abs_dev(args.y, saved->labels, sums, counts, abs_dev));
  if (comm != nullptr) {
    MOE_RETURN_IF_ERROR(comm->all_reduce(abs_dev, abs_dev, comm::ReduceOp::kSum));
  }
  saved->metric = Tensor::empty({experts, d}, args.y.dtype());
  MOE_ASSIGN_OR_RETURN(kernels::AcMetricSummary summary,
                       kernels::ac_metric(cfg_.ac, abs_dev, counts, saved->metric));
  saved->router_input = Tensor::empty({tokens, d}, args.y.dtype());
  MOE_RETURN_IF_ERROR(
      kernels::ac_apply_metric(args.y, saved->labels, saved->metric, saved->router_input));
  saved->ac_applied = true;

  // Statistics (S10, S11): this rank's view; with global statistics every rank holds the global
  // clusters, so only the local token counts are reported (they sum to the global sizes).
  if (stats != nullptr) {
    Tensor local_counts = Tensor::empty({experts}, DType::kI64);
    Tensor local_sums = Tensor::empty({experts, d}, DType::kF64);
    MOE_RETURN_IF_ERROR(kernels::ac_cluster_sums(args.y, saved->labels, local_sums, local_counts));
    // Accumulated over the micro-batches of a step.
    const bool first = stats->cluster_size.empty();
    if (first) {
      stats->cluster_size.assign(experts, 0);
      stats->cluster_dispersion.assign(experts, 0.0);
    }
    const double* dev = abs_dev.data<double>();
    const int64_t* n = counts.data<int64_t>();
    for (int64_t k = 0; k < experts; ++k) {
      const int64_t local_n = local_counts.data<int64_t>()[k];
      stats->cluster_size[k] += local_n;
      if (n[k] == 0) continue;
      double mean_mad = 0;
      for (int64_t q = 0; q < d; ++q) mean_mad += dev[k * d + q] / static_cast<double>(n[k]);
      mean_mad /= static_cast<double>(d);
      stats->cluster_dispersion[k] += mean_mad * static_cast<double>(local_n);
    }
    stats->tiny_clusters += summary.tiny_clusters;
    stats->metric_min = first ? summary.min : std::min(stats->metric_min, summary.min);
    stats->metric_max = first ? summary.max : std::max(stats->metric_max, summary.max);
    stats->metric_mean = summary.mean;
  }
  return Status::OK();
}

Status MoeRouter::forward(const RouterForwardArgs& args, RouterSaved* saved,
                          RouterStatsInfo* stats) {
  const DType dtype = args.y.dtype();
  const int64_t tokens = args.y.dim(0), experts = cfg_.num_experts, k = cfg_.top_k;
  if (args.y.ndim() != 2 || args.y.dim(1) != cfg_.d_model) {
    return invalid_argument_error("moe router: input ", args.y.to_string(), " is not [T, ",
                                  cfg_.d_model, "]");
  }
  // AC needs a previous layer's clusters: the first MoE layer of a model is always standard.
  saved->ac_applied = false;
  if (cfg_.ac.enabled && args.prev_top1.numel() > 0) {
    MOE_RETURN_IF_ERROR(compute_ac_metric(args, saved, stats));
  } else {
    saved->router_input = Tensor::copy_of(args.y);
  }

  saved->logits = Tensor::empty({tokens, experts}, dtype);
  MOE_RETURN_IF_ERROR(kernels::gemm(saved->router_input, false, w_->value, false, saved->logits));
  MOE_RETURN_IF_ERROR(add_row_bias(saved->logits, b_->value));

  saved->probs = Tensor::empty({tokens, experts}, dtype);
  saved->lse = Tensor::empty({tokens}, dtype);
  saved->idx = Tensor::empty({tokens, k}, DType::kI32);
  saved->gate = Tensor::empty({tokens, k}, dtype);
  if (cfg_.sparsemixer.enabled) {
    saved->mask = Tensor::empty({tokens, experts}, DType::kU8);
    saved->scale = Tensor::empty({tokens}, dtype);
    saved->is_argmax = Tensor::empty({tokens}, DType::kU8);
    kernels::SparseMixerRouteArgs route{cfg_.sparsemixer, args.training, args.sparsemixer_rng,
                                        args.token_offset};
    MOE_RETURN_IF_ERROR(kernels::sparsemixer_route(route, saved->logits, saved->idx, saved->gate,
                                                   saved->probs, saved->lse, saved->mask,
                                                   saved->scale, saved->is_argmax));
  } else {
    MOE_RETURN_IF_ERROR(kernels::topk_softmax(saved->logits, saved->idx, saved->gate,
                                              saved->probs, saved->lse));
  }

  // The explicit argmax (B.9 #6), lowest index on ties, whatever was sampled.
  saved->top1 = Tensor::empty({tokens}, DType::kI32);
  MOE_RETURN_IF_ERROR(kernels::argmax_rows(saved->logits, saved->top1));

  if (stats != nullptr && cfg_.sparsemixer.enabled) {
    const uint8_t* mask = saved->mask.data<uint8_t>();
    const uint8_t* is_argmax = saved->is_argmax.data<uint8_t>();
    MOE_RETURN_IF_ERROR(kernels::dispatch_host_float("router stats", saved->scale, [&](auto tag) {
      using T = decltype(tag);
      const T* c = saved->scale.data<T>();
      for (int64_t t = 0; t < tokens; ++t) {
        int64_t unmasked = 0;
        for (int64_t e = 0; e < experts; ++e) unmasked += mask[t * experts + e];
        stats->unmasked_sum += static_cast<double>(unmasked);
        stats->single_expert_tokens += unmasked == 1;
        stats->non_argmax_tokens += is_argmax[t] == 0;
        stats->halved_tokens += c[t] != T(1);
      }
    }));
  }
  return Status::OK();
}

StatusOr<double> MoeRouter::aux_loss(const TensorView& load, comm::Communicator* data_comm,
                                     RouterSaved* saved, RouterStatsInfo* stats) const {
  const int64_t tokens = saved->logits.dim(0), experts = cfg_.num_experts;
  MOE_ASSIGN_OR_RETURN(kernels::AuxSums sums, kernels::aux_sums(saved->probs, saved->lse));
  saved->balance_load = to_vector<int64_t>(load);
  saved->balance_tokens = tokens;
  if (cfg_.balance_scope == BalanceScope::kGlobal && data_comm != nullptr &&
      data_comm->world_size() > 1) {
    // One all-reduce of [load (E), prob sums (E), token count, lse^2 sum] in f64.
    Tensor packed = Tensor::empty({2 * experts + 2}, DType::kF64);
    double* v = packed.data<double>();
    for (int64_t e = 0; e < experts; ++e) {
      v[e] = static_cast<double>(saved->balance_load[e]);
      v[experts + e] = sums.prob_sum[e];
    }
    v[2 * experts] = static_cast<double>(tokens);
    v[2 * experts + 1] = sums.lse_sq_sum;
    MOE_RETURN_IF_ERROR(data_comm->all_reduce(packed, packed, comm::ReduceOp::kSum));
    for (int64_t e = 0; e < experts; ++e) {
      saved->balance_load[e] = static_cast<int64_t>(std::llround(v[e]));
      sums.prob_sum[e] = v[experts + e];
    }
    saved->balance_tokens = static_cast<int64_t>(std::llround(v[2 * experts]));
    sums.lse_sq_sum = v[2 * experts + 1];
  }
  const kernels::AuxLosses losses =
      kernels::aux_losses(sums, saved->balance_load, saved->balance_tokens, cfg_.top_k);
  if (stats != nullptr) {
    stats->balance_loss_sum += losses.balance * static_cast<double>(tokens);
    stats->z_loss_sum += losses.z * static_cast<double>(tokens);
    MOE_ASSIGN_OR_RETURN(double entropy, kernels::entropy_sum(saved->probs));
    stats->entropy_sum += entropy;
    double top1_gate = 0;
    MOE_RETURN_IF_ERROR(kernels::dispatch_host_float("router stats", saved->gate, [&](auto tag) {
      using T = decltype(tag);
      const T* g = saved->gate.data<T>();
      for (int64_t t = 0; t < tokens; ++t) top1_gate += g[t * cfg_.top_k];
    }));
    stats->top1_gate_sum += top1_gate;
  }
  return cfg_.balance_loss_coef * losses.balance + cfg_.z_loss_coef * losses.z;
}

Status MoeRouter::backward(const TensorView& d_gate, const RouterSaved& saved, double aux_scale,
                           const TensorView& d_y) {
  const int64_t tokens = saved.logits.dim(0), experts = cfg_.num_experts;
  Tensor d_logits = Tensor::zeros({tokens, experts}, saved.logits.dtype());
  if (cfg_.sparsemixer.enabled) {
    MOE_RETURN_IF_ERROR(kernels::sparsemixer_backward(cfg_.sparsemixer.gate_grad, d_gate,
                                                      saved.idx, saved.probs, saved.mask,
                                                      saved.scale, d_logits));
  } else {
    MOE_RETURN_IF_ERROR(kernels::topk_softmax_backward(d_gate, saved.gate, saved.idx, d_logits));
  }
  MOE_RETURN_IF_ERROR(kernels::aux_losses_backward(
      saved.logits, saved.probs, saved.balance_load, saved.balance_tokens, saved.lse, cfg_.top_k,
      aux_scale * cfg_.balance_loss_coef, aux_scale * cfg_.z_loss_coef, d_logits));

  // s = r W + b: dW += r^T ds, db += sum_t ds, dr = ds W^T.
  MOE_RETURN_IF_ERROR(kernels::gemm(saved.router_input, true, d_logits, false, w_->grad, 1.0, 1.0));
  MOE_RETURN_IF_ERROR(kernels::bias_grad_grouped(d_logits, b_->grad.view().reshape({1, experts}),
                                                 {0, tokens}));
  if (saved.ac_applied) {
    Tensor d_r = Tensor::empty({tokens, cfg_.d_model}, saved.logits.dtype());
    MOE_RETURN_IF_ERROR(kernels::gemm(d_logits, false, w_->value, true, d_r));
    // The metric is a constant (no gradient through the statistics, B.4).
    return kernels::ac_apply_metric_backward(d_r, saved.labels, saved.metric, d_y);
  }
  return kernels::gemm(d_logits, false, w_->value, true, d_y, 1.0, 1.0);
}

}  // namespace moe
