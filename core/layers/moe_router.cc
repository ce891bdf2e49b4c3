#include "core/layers/moe_router.h"

#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/init.h"
#include "kernels/load_balance.h"
#include "kernels/moe_stats.h"
#include "kernels/router.h"

namespace moe {
namespace {

// The slots [first, first + n) of a statistics block.
TensorView slots(const TensorView& stats, int64_t first, int64_t n = 1) {
  return stats.rows(first, first + n);
}

}  // namespace

MoeRouter::MoeRouter(const std::string& prefix, const MoeLayerConfig& cfg, ParameterSet* params)
    : ctx_(params->context()), params_(params), cfg_(cfg) {
  w_ = &params->add(prefix + ".w_router", {cfg.d_model, cfg.num_experts});
  if (cfg.linear_bias) {
    b_ = &params->add(prefix + ".b_router", {cfg.num_experts}, ParamKind::kDense, false);
  }
  if (cfg.bias_update_rate > 0) {
    // Zero at initialisation (the model's initialiser); never decayed, never given a gradient.
    score_bias_ = &params->add(prefix + ".score_bias", {cfg.num_experts}, ParamKind::kDense, false);
  }
}

kernels::AuxLossWeights MoeRouter::aux_weights(double scale) const {
  kernels::AuxLossWeights w;
  w.top_k = cfg_.top_k;
  w.balance = scale * cfg_.balance_loss_coef;
  w.z = scale * cfg_.z_loss_coef;
  w.seq = scale * cfg_.seq_balance_loss_coef;
  w.score = cfg_.score_function;
  return w;
}

kernels::RouteOptions MoeRouter::route_options() const {
  kernels::RouteOptions opt;
  opt.score = cfg_.score_function;
  opt.renormalize = cfg_.renormalize;
  opt.scaling = cfg_.routed_scaling;
  if (score_bias_ != nullptr) opt.selection_bias = score_bias_->value;
  opt.groups = cfg_.expert_groups;
  opt.topk_groups = cfg_.kept_groups();
  opt.group_top = cfg_.group_top();
  return opt;
}

Status MoeRouter::accumulate_step_load(const RouterSaved& saved) {
  if (score_bias_ == nullptr) return Status::OK();
  if (step_load_.numel() == 0) {
    MOE_ASSIGN_OR_RETURN(step_load_, ctx_.zeros({cfg_.num_experts}, DType::kF64));
  }
  // aux_packed[0, E): the loads of every data rank's tokens (kernels/router.h aux_sums).
  return kernels::axpy(ctx_, 1.0, saved.aux_packed.view().rows(0, cfg_.num_experts), step_load_);
}

Status MoeRouter::update_score_bias(bool apply) {
  if (score_bias_ == nullptr || step_load_.numel() == 0) return Status::OK();
  if (apply) {
    MOE_RETURN_IF_ERROR(
        kernels::score_bias_update(ctx_, step_load_, cfg_.bias_update_rate, score_bias_->value));
    MOE_RETURN_IF_ERROR(params_->store_value(*score_bias_));
  }
  return kernels::init_constant(ctx_, step_load_, 0.0);
}

Status MoeRouter::report_score_bias(const TensorView& stats) const {
  if (score_bias_ == nullptr || stats.numel() == 0) return Status::OK();
  const RouterStatsLayout layout(cfg_.num_experts);
  MOE_RETURN_IF_ERROR(kernels::convert(ctx_, score_bias_->value,
                                       slots(stats, layout.score_bias(), cfg_.num_experts)));
  return kernels::init_constant(ctx_, slots(stats, layout.score_bias_set()), 1.0);
}

Status MoeRouter::compute_ac_metric(const RouterForwardArgs& args, RouterSaved* saved) {
  const int64_t experts = cfg_.num_experts, d = cfg_.d_model;
  const TensorView& y = args.y;
  saved->labels = args.prev_top1;
  MOE_ASSIGN_OR_RETURN(Tensor sums, ctx_.empty({experts, d}, DType::kF64));
  MOE_ASSIGN_OR_RETURN(Tensor counts, ctx_.empty({experts}, DType::kI64));
  MOE_ASSIGN_OR_RETURN(Tensor abs_dev, ctx_.empty({experts, d}, DType::kF64));
  MOE_RETURN_IF_ERROR(kernels::ac_cluster_sums(ctx_, y, saved->labels, sums, counts));
  // This rank's cluster sizes (the statistics report them; they sum to the global sizes).
  Tensor local_counts = counts;
  comm::Communicator* comm = cfg_.ac.global_stats ? args.stats_comm : nullptr;
  if (comm != nullptr) {
    if (args.stats.numel() > 0) {
      MOE_ASSIGN_OR_RETURN(local_counts, ctx_.clone(counts));
    }
    MOE_RETURN_IF_ERROR(comm->all_reduce(sums, sums, comm::ReduceOp::kSum, ctx_.stream()));
    MOE_RETURN_IF_ERROR(comm->all_reduce(counts, counts, comm::ReduceOp::kSum, ctx_.stream()));
  }
  MOE_RETURN_IF_ERROR(kernels::ac_cluster_abs_dev(ctx_, y, saved->labels, sums, counts, abs_dev));
  if (comm != nullptr) {
    MOE_RETURN_IF_ERROR(comm->all_reduce(abs_dev, abs_dev, comm::ReduceOp::kSum, ctx_.stream()));
  }
  const DType f = compute_dtype(y.dtype());
  MOE_ASSIGN_OR_RETURN(saved->metric, ctx_.empty({experts, d}, f));
  MOE_ASSIGN_OR_RETURN(Tensor summary, ctx_.empty({kernels::kAcSummarySize}, DType::kF64));
  MOE_RETURN_IF_ERROR(kernels::ac_metric(ctx_, cfg_.ac, abs_dev, counts, saved->metric, summary));
  MOE_ASSIGN_OR_RETURN(saved->router_input, ctx_.empty({y.dim(0), d}, f));
  MOE_RETURN_IF_ERROR(
      kernels::ac_apply_metric(ctx_, y, saved->labels, saved->metric, saved->router_input));
  saved->ac_applied = true;
  if (args.stats.numel() > 0) {
    const RouterStatsLayout layout(experts);
    MOE_RETURN_IF_ERROR(
        kernels::ac_stats(ctx_, abs_dev, counts, local_counts, summary,
                          slots(args.stats, layout.ac(), 2 * experts + kAcStatsFixed)));
  }
  return Status::OK();
}

Status MoeRouter::forward(const RouterForwardArgs& args, RouterSaved* saved) {
  const TensorView& y = args.y;
  if (y.ndim() != 2 || y.dim(1) != cfg_.d_model) {
    return invalid_argument_error("moe router: input ", y.to_string(), " is not [T, ", cfg_.d_model,
                                  "]");
  }
  const int64_t tokens = y.dim(0);
  if (args.seq_len < 0 || (args.seq_len > 0 && tokens % args.seq_len != 0)) {
    return invalid_argument_error("moe router: ", tokens, " tokens are not sequences of ",
                                  args.seq_len);
  }
  if (args.seq_len == 0 && cfg_.seq_balance_loss_coef > 0) {
    return invalid_argument_error(
        "moe router: seq_balance_loss_coef > 0 needs the sequence length (seq_len)");
  }
  const DType f = compute_dtype(y.dtype());
  // AC needs a previous layer's clusters: the first MoE layer of a model is always standard.
  saved->ac_applied = false;
  if (cfg_.ac.enabled && args.prev_top1.numel() > 0) {
    MOE_RETURN_IF_ERROR(compute_ac_metric(args, saved));
  } else if (y.dtype() == f) {
    saved->router_input = args.y;
  } else {
    MOE_ASSIGN_OR_RETURN(saved->router_input, ctx_.empty({tokens, cfg_.d_model}, f));
    MOE_RETURN_IF_ERROR(kernels::convert(ctx_, y, saved->router_input));
  }
  MOE_RETURN_IF_ERROR(compute_logits(saved));
  MOE_RETURN_IF_ERROR(route(args, saved));
  saved->seq_counts = Tensor();
  if (args.seq_len > 0) {
    MOE_ASSIGN_OR_RETURN(saved->seq_counts,
                         ctx_.empty({tokens / args.seq_len, cfg_.num_experts}, DType::kI64));
    MOE_RETURN_IF_ERROR(kernels::sequence_counts(ctx_, saved->idx, saved->seq_counts));
  }
  // The explicit argmax (B.9 #6), lowest index on ties, whatever was sampled.
  MOE_ASSIGN_OR_RETURN(saved->top1, ctx_.empty({tokens}, DType::kI32));
  return kernels::argmax_rows(ctx_, saved->logits, saved->top1);
}

Status MoeRouter::compute_logits(RouterSaved* saved) {
  const int64_t tokens = saved->router_input.dim(0), experts = cfg_.num_experts;
  const DType f = saved->router_input.dtype();
  MOE_ASSIGN_OR_RETURN(saved->logits, ctx_.empty({tokens, experts}, f));
  // AC layers may score against unit-norm expert embeddings without a bias (the reference code's
  // gate); otherwise logits = r W_r + b_r (no b_r without linear_bias).
  saved->unit_norm = cfg_.ac.enabled && cfg_.ac.logits == AcLogits::kUnitNormEmbeddings;
  if (saved->unit_norm) {
    MOE_ASSIGN_OR_RETURN(saved->w_unit, ctx_.empty(w_->value.shape(), f));
    MOE_ASSIGN_OR_RETURN(saved->inv_norm, ctx_.empty({experts}, f));
    MOE_RETURN_IF_ERROR(
        kernels::normalize_columns(ctx_, w_->value, saved->w_unit, saved->inv_norm));
    return kernels::gemm(ctx_, saved->router_input, false, saved->w_unit, false, saved->logits);
  }
  MOE_RETURN_IF_ERROR(
      kernels::gemm(ctx_, saved->router_input, false, w_->value, false, saved->logits));
  if (b_ == nullptr) return Status::OK();
  return kernels::add_bias(ctx_, saved->logits, b_->value);
}

Status MoeRouter::route(const RouterForwardArgs& args, RouterSaved* saved) {
  const int64_t tokens = saved->logits.dim(0), experts = cfg_.num_experts, k = cfg_.top_k;
  const DType f = saved->logits.dtype();
  MOE_ASSIGN_OR_RETURN(saved->probs, ctx_.empty({tokens, experts}, f));
  MOE_ASSIGN_OR_RETURN(saved->lse, ctx_.empty({tokens}, f));
  MOE_ASSIGN_OR_RETURN(saved->idx, ctx_.empty({tokens, k}, DType::kI32));
  MOE_ASSIGN_OR_RETURN(saved->gate, ctx_.empty({tokens, k}, f));
  if (!cfg_.sparsemixer.enabled) {
    return kernels::topk_route(ctx_, route_options(), saved->logits, saved->idx, saved->gate,
                               saved->probs, saved->lse);
  }
  MOE_ASSIGN_OR_RETURN(saved->mask, ctx_.empty({tokens, experts}, DType::kU8));
  MOE_ASSIGN_OR_RETURN(saved->scale, ctx_.empty({tokens}, f));
  MOE_ASSIGN_OR_RETURN(saved->is_argmax, ctx_.empty({tokens}, DType::kU8));
  kernels::SparseMixerRouteArgs route{cfg_.sparsemixer, args.training, args.sparsemixer_rng,
                                      args.token_offset};
  MOE_RETURN_IF_ERROR(kernels::sparsemixer_route(ctx_, route, saved->logits,
                                                 {saved->idx, saved->gate, saved->probs, saved->lse,
                                                  saved->mask, saved->scale, saved->is_argmax}));
  if (args.stats.numel() == 0) return Status::OK();
  return kernels::sparsemixer_stats(ctx_, saved->mask, saved->is_argmax, saved->scale,
                                    slots(args.stats, RouterStatsLayout::kUnmaskedSum, 4));
}

StatusOr<Tensor> MoeRouter::aux_loss(const Tensor& load, comm::Communicator* data_comm,
                                     RouterSaved* saved, const TensorView& stats) const {
  const int64_t tokens = saved->logits.dim(0), experts = cfg_.num_experts;
  MOE_ASSIGN_OR_RETURN(saved->aux_packed,
                       ctx_.empty({kernels::aux_packed_size(experts)}, DType::kF64));
  MOE_RETURN_IF_ERROR(kernels::aux_sums(ctx_, saved->probs, saved->lse, load, saved->seq_counts,
                                        tokens, saved->aux_packed));
  if (cfg_.balance_scope == BalanceScope::kGlobal && data_comm != nullptr &&
      data_comm->world_size() > 1) {
    // One all-reduce of [load (E), prob sums (E), token count, lse^2 sum, sequence sums (E),
    // sequence count] in f64.
    MOE_RETURN_IF_ERROR(data_comm->all_reduce(saved->aux_packed, saved->aux_packed,
                                              comm::ReduceOp::kSum, ctx_.stream()));
  }
  MOE_ASSIGN_OR_RETURN(Tensor losses, ctx_.empty({kernels::kAuxLossesSize}, DType::kF64));
  MOE_RETURN_IF_ERROR(kernels::aux_losses(ctx_, saved->aux_packed, aux_weights(1.0), losses));
  if (stats.numel() > 0) {
    // Balance, z and seq as T-weighted sums over this rank's tokens; the weighted loss as is.
    MOE_RETURN_IF_ERROR(kernels::axpy(ctx_, static_cast<double>(tokens), losses.rows(0, 2),
                                      slots(stats, RouterStatsLayout::kBalanceLossSum, 2)));
    MOE_RETURN_IF_ERROR(kernels::axpy(ctx_, static_cast<double>(tokens), losses.rows(3, 4),
                                      slots(stats, RouterStatsLayout::kSeqBalanceLossSum)));
    MOE_RETURN_IF_ERROR(
        kernels::axpy(ctx_, 1.0, losses.rows(2, 3), slots(stats, RouterStatsLayout::kAuxLoss)));
    MOE_RETURN_IF_ERROR(
        kernels::entropy_sum(ctx_, saved->probs, slots(stats, RouterStatsLayout::kEntropySum)));
    MOE_RETURN_IF_ERROR(
        kernels::column_sum(ctx_, saved->gate, 0, slots(stats, RouterStatsLayout::kTop1GateSum)));
  }
  return losses;
}

Status MoeRouter::backward(const Tensor& d_gate, const RouterSaved& saved, double aux_scale,
                           const TensorView& d_y) {
  const int64_t tokens = saved.logits.dim(0), experts = cfg_.num_experts;
  const DType f = saved.logits.dtype();
  MOE_ASSIGN_OR_RETURN(Tensor d_logits, ctx_.zeros({tokens, experts}, f));
  if (cfg_.sparsemixer.enabled) {
    MOE_RETURN_IF_ERROR(kernels::sparsemixer_backward(ctx_, cfg_.sparsemixer.gate_grad, d_gate,
                                                      saved.idx, saved.probs, saved.mask,
                                                      saved.scale, d_logits));
  } else {
    MOE_RETURN_IF_ERROR(kernels::topk_route_backward(ctx_, route_options(), saved.logits, d_gate,
                                                     saved.gate, saved.idx, d_logits));
  }
  MOE_RETURN_IF_ERROR(kernels::aux_losses_backward(ctx_, saved.logits, saved.probs,
                                                   saved.aux_packed, saved.lse, saved.seq_counts,
                                                   aux_weights(aux_scale), d_logits));

  // s = r W + b: dW += r^T ds, db += sum_t ds, dr = ds W^T. Unit-norm embeddings: s = r W_n,
  // dW += the normalisation's backward of r^T ds, dr = ds W_n^T (no bias).
  TensorView weight = w_->value;
  if (saved.unit_norm) {
    weight = saved.w_unit;
    MOE_ASSIGN_OR_RETURN(Tensor d_w_unit, ctx_.empty(w_->value.shape(), f));
    MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, saved.router_input, true, d_logits, false, d_w_unit));
    MOE_RETURN_IF_ERROR(kernels::normalize_columns_backward(ctx_, d_w_unit, saved.w_unit,
                                                            saved.inv_norm, w_->grad));
  } else {
    MOE_RETURN_IF_ERROR(
        kernels::gemm(ctx_, saved.router_input, true, d_logits, false, w_->grad, 1.0, 1.0));
    if (b_ != nullptr) MOE_RETURN_IF_ERROR(kernels::bias_grad(ctx_, d_logits, b_->grad));
  }
  if (!saved.ac_applied && d_y.dtype() == f) {
    return kernels::gemm(ctx_, d_logits, false, weight, true, d_y, 1.0, 1.0);
  }
  MOE_ASSIGN_OR_RETURN(Tensor d_r, ctx_.empty({tokens, cfg_.d_model}, f));
  MOE_RETURN_IF_ERROR(kernels::gemm(ctx_, d_logits, false, weight, true, d_r));
  if (saved.ac_applied) {
    // The metric is a constant (no gradient through the statistics, B.4).
    return kernels::ac_apply_metric_backward(ctx_, d_r, saved.labels, saved.metric, d_y);
  }
  return kernels::axpy(ctx_, 1.0, d_r, d_y);
}

}  // namespace moe
