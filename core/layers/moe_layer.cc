#include "core/layers/moe_layer.h"

#include "core/layers/rng_streams.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/init.h"
#include "kernels/moe_dispatch.h"
#include "kernels/moe_stats.h"

namespace moe {
namespace {

// t is [T, D] with dtype `dtype` (or empty, when optional).
Status check_activation(const char* name, const TensorView& t, const TensorView& like, DType dtype,
                        bool required) {
  if (!required && t.numel() == 0) return Status::OK();
  if (t.shape() != like.shape() || t.dtype() != dtype) {
    return invalid_argument_error("moe layer: ", name, " is ", t.to_string(), ", expected ",
                                  dtype_name(dtype), like.shape().to_string());
  }
  return Status::OK();
}

TensorView slot(const TensorView& stats, int64_t first, int64_t n = 1) {
  return stats.rows(first, first + n);
}

}  // namespace

MoeLayer::MoeLayer(const std::string& prefix, const MoeLayerConfig& cfg, int block, int moe_index,
                   ParameterSet* params, comm::Communicator* ep_comm)
    : ctx_(params->context()),
      cfg_(cfg),
      block_(block),
      moe_index_(moe_index),
      router_(prefix, cfg, params),
      dispatcher_(cfg, &params->context(), ep_comm),
      experts_(prefix, cfg, cfg.num_experts / dispatcher_.ep_size(),
               dispatcher_.first_local_expert(), params) {
  if (cfg.sparsemixer.enabled && cfg.sparsemixer.omega) {
    // All ones at initialisation (spec/sparsemixer-acmoe.md A.3): the model's initialiser.
    omega_ = &params->add(prefix + ".omega", {cfg.d_model}, ParamKind::kDense, false);
  }
  if (cfg.shared_experts > 0) {
    shared_ = std::make_unique<SharedExperts>(prefix + ".shared", cfg, params);
  }
}

kernels::ResidualArgs residual_args_for(const MoeLayerConfig& cfg) {
  kernels::ResidualArgs a;
  const bool paper = cfg.convention == MomentumConvention::kPaper;
  const double mu = cfg.effective_mu(), gamma = cfg.effective_gamma();
  switch (cfg.residual) {
    case ResidualKind::kPlain:
      a.form = kernels::ResidualForm::kPlain;
      break;
    case ResidualKind::kHeavyBall:
    case ResidualKind::kRobust:
      // Paper: p = u + mu p, out = x + gamma p. Reference code: m = mu m + gamma u, out = x - m.
      a.form = kernels::ResidualForm::kMomentum;
      a.a_state = mu;
      a.a_input = paper ? 1.0 : gamma;
      a.a_out = paper ? gamma : -1.0;
      break;
    case ResidualKind::kAdam:
      a.form = kernels::ResidualForm::kAdam;
      a.a_state = mu;
      a.a_input = paper ? 1.0 : gamma;
      a.beta1 = cfg.adam.beta1;
      a.beta2 = cfg.adam.beta2;
      a.eps = cfg.adam.eps;
      a.eps_inside_sqrt = cfg.adam.eps_placement == AdamEpsPlacement::kInsideSqrt;
      a.kappa = cfg.adam.kappa;
      a.gamma = cfg.adam.gamma;
      a.adam_sign = paper ? 1.0 : -1.0;  // f = -u (paper) or f = +u (Fig. 12, reference code)
      break;
  }
  return a;
}

double input_shift_for(const MoeLayerConfig& cfg) {
  if (cfg.residual != ResidualKind::kRobust) return 0.0;
  // y = x + alpha gamma p (paper); with m = -gamma p: y = x - alpha m (reference code).
  const double alpha = cfg.robust.alpha();
  return cfg.convention == MomentumConvention::kPaper ? alpha * cfg.robust.gamma() : -alpha;
}

StatusOr<MoeLayerOutputs> MoeLayer::forward(const MoeLayerInputs& in, MoeLayerSaved* saved) {
  MOE_RETURN_IF_ERROR(check_inputs(in));
  saved->training = in.training;
  saved->token_offset = in.token_offset;
  saved->output_dropout_rng =
      site_rng(in.seed, RandomSite::kMoeOut, block_, in.step, in.device_step, in.seq_len);
  const TensorView& stats = in.stats;
  const int64_t tokens = in.x_in.dim(0);
  if (stats.numel() > 0) {
    MOE_RETURN_IF_ERROR(kernels::add_scalar(ctx_, slot(stats, RouterStatsLayout::kTokens),
                                            static_cast<double>(tokens)));
    MOE_RETURN_IF_ERROR(kernels::add_scalar(ctx_, slot(stats, RouterStatsLayout::kSlots),
                                            static_cast<double>(tokens * cfg_.top_k)));
  }
  MOE_ASSIGN_OR_RETURN(Tensor y, route_and_plan(in, saved));
  MOE_RETURN_IF_ERROR(run_experts_and_combine(in, y, saved));
  MOE_ASSIGN_OR_RETURN(MoeLayerOutputs out, apply_residual(in, saved));
  MOE_RETURN_IF_ERROR(aux_loss_and_stats(in, out, saved));
  return out;
}

Status MoeLayer::check_inputs(const MoeLayerInputs& in) const {
  const Tensor& x = in.x_in;
  if (x.ndim() != 2 || x.dim(1) != cfg_.d_model || !dtype_is_floating(x.dtype())) {
    return invalid_argument_error("moe layer (block ", block_, "): input ", x.view().to_string(),
                                  " is not [T, ", cfg_.d_model, "]");
  }
  const DType act = x.dtype(), f = compute_dtype(act);
  MOE_RETURN_IF_ERROR(check_activation("x_base", in.x_base, x, act, true));
  MOE_RETURN_IF_ERROR(check_activation("p_in", in.p_in, x, f, false));
  MOE_RETURN_IF_ERROR(check_activation("adam_m_in", in.adam_m_in, x, f, false));
  MOE_RETURN_IF_ERROR(check_activation("adam_v_in", in.adam_v_in, x, f, false));
  const RouterStatsLayout layout(cfg_.num_experts);
  const TensorView& stats = in.stats;
  if (stats.numel() > 0 && (stats.dtype() != DType::kF64 || stats.numel() != layout.size())) {
    return invalid_argument_error("moe layer (block ", block_, "): statistics block ",
                                  stats.to_string(), " is not f64[", layout.size(), "]");
  }
  return Status::OK();
}

StatusOr<Tensor> MoeLayer::route_and_plan(const MoeLayerInputs& in, MoeLayerSaved* saved) {
  const Tensor& x = in.x_in;
  const TensorView& stats = in.stats;
  // Robust: the router and the experts see y = x + alpha gamma p; the residual base stays x.
  Tensor y = x;
  saved->robust_shift = cfg_.residual == ResidualKind::kRobust && in.p_in.numel() > 0;
  if (saved->robust_shift) {
    MOE_ASSIGN_OR_RETURN(y, ctx_.empty_like(x));
    MOE_RETURN_IF_ERROR(kernels::residual_shift_input(ctx_, x, in.p_in, input_shift_for(cfg_), y));
  }
  RouterForwardArgs route{
      y,
      in.prev_top1,
      in.training,
      site_rng(in.seed, RandomSite::kSparseMixer, block_, in.step, in.device_step, in.seq_len),
      in.token_offset,
      in.stats_comm,
      stats,
      in.seq_len};
  MOE_RETURN_IF_ERROR(router_.forward(route, &saved->router));
  DispatchCounters counters;
  if (stats.numel() > 0) {
    counters.drops = slot(stats, RouterStatsLayout::kDroppedSlots, 2);
    if (dispatcher_.deduplicates()) {
      counters.exchange = slot(stats, RouterStatsLayout::kDispatchRowsUndeduplicated, 2);
      // Bytes per dispatched row: D activations of x's dtype.
      MOE_RETURN_IF_ERROR(kernels::init_constant(
          ctx_, slot(stats, RouterStatsLayout::kDispatchRowBytes),
          static_cast<double>(cfg_.d_model * static_cast<int64_t>(dtype_size(y.dtype())))));
    }
  }
  MOE_RETURN_IF_ERROR(dispatcher_
                          .plan(saved->router.idx, in.token_offset, counters, &saved->plan,
                                in.training || in.training_capacity, in.device_step, in.seq_len)
                          .with_context(str_cat("block ", block_)));
  return y;
}

Status MoeLayer::run_experts_and_combine(const MoeLayerInputs& in, const Tensor& y,
                                         MoeLayerSaved* saved) {
  const DispatchPlan& plan = saved->plan;
  MOE_ASSIGN_OR_RETURN(Tensor rows, dispatcher_.dispatch(y, plan));
  const float expert_p = in.training ? static_cast<float>(cfg_.expert_dropout) : 0.f;
  MOE_ASSIGN_OR_RETURN(
      Tensor y_rows, experts_.forward(rows, plan.blocks, plan.recv_key,
                                      site_rng(in.seed, RandomSite::kExpertHidden, block_, in.step,
                                               in.device_step, in.seq_len),
                                      expert_p, &saved->experts, in.recompute_hidden));
  MOE_ASSIGN_OR_RETURN(saved->y_send, dispatcher_.gather_back(y_rows, plan));

  MOE_ASSIGN_OR_RETURN(saved->u, ctx_.empty({y.dim(0), cfg_.d_model}, y.dtype()));
  const TensorView omega = omega_ != nullptr ? omega_->value : TensorView();
  MOE_RETURN_IF_ERROR(
      kernels::combine(ctx_, saved->y_send, plan.row, saved->router.gate, omega, saved->u));
  if (shared_ != nullptr) {
    // The shared experts on this rank's tokens (their hidden dropout keyed by token).
    MOE_ASSIGN_OR_RETURN(Tensor s,
                         shared_->forward(y, in.token_offset, in.training,
                                          site_rng(in.seed, RandomSite::kFfnHidden, block_, in.step,
                                                   in.device_step, in.seq_len),
                                          &saved->shared, in.recompute_hidden));
    MOE_RETURN_IF_ERROR(kernels::add(ctx_, saved->u, s, saved->u));
  }
  if (in.training && cfg_.output_dropout > 0) {
    MOE_RETURN_IF_ERROR(
        kernels::dropout_forward(ctx_, saved->u, {}, in.token_offset, saved->output_dropout_rng,
                                 static_cast<float>(cfg_.output_dropout), saved->u));
  }
  return Status::OK();
}

StatusOr<MoeLayerOutputs> MoeLayer::apply_residual(const MoeLayerInputs& in, MoeLayerSaved* saved) {
  const int64_t tokens = in.x_in.dim(0), d = cfg_.d_model;
  const DType act = in.x_in.dtype(), f = compute_dtype(act);
  MoeLayerOutputs out;
  const bool adam = cfg_.residual == ResidualKind::kAdam;
  MOE_ASSIGN_OR_RETURN(out.out, ctx_.empty({tokens, d}, act));
  MOE_ASSIGN_OR_RETURN(out.p_out, ctx_.empty({tokens, d}, f));
  if (adam) {
    MOE_ASSIGN_OR_RETURN(saved->m_out, ctx_.empty({tokens, d}, f));
    MOE_ASSIGN_OR_RETURN(saved->v_out, ctx_.empty({tokens, d}, f));
  }
  MOE_RETURN_IF_ERROR(kernels::residual_forward(ctx_, residual_args_for(cfg_), in.x_base, saved->u,
                                                {in.p_in, in.adam_m_in, in.adam_v_in}, out.out,
                                                {out.p_out, saved->m_out, saved->v_out}));
  // Layers other than Adam pass the moments through unchanged.
  out.adam_m_out = adam ? saved->m_out : in.adam_m_in;
  out.adam_v_out = adam ? saved->v_out : in.adam_v_in;
  out.top1 = saved->router.top1;
  return out;
}

Status MoeLayer::aux_loss_and_stats(const MoeLayerInputs& in, const MoeLayerOutputs& out,
                                    MoeLayerSaved* saved) {
  const TensorView& stats = in.stats;
  const DispatchPlan& plan = saved->plan;
  MOE_ASSIGN_OR_RETURN(saved->aux,
                       router_.aux_loss(plan.load, in.stats_comm, &saved->router, stats));
  if (in.training && !in.replay) MOE_RETURN_IF_ERROR(router_.accumulate_step_load(saved->router));
  MOE_RETURN_IF_ERROR(router_.report_score_bias(stats));
  saved->aux_grad_multiplier =
      (cfg_.balance_scope == BalanceScope::kGlobal && in.stats_comm != nullptr)
          ? static_cast<double>(in.stats_comm->world_size())
          : 1.0;
  if (stats.numel() > 0) {
    const RouterStatsLayout layout(cfg_.num_experts);
    MOE_RETURN_IF_ERROR(kernels::accumulate_counts(
        ctx_, plan.load, slot(stats, layout.expert_load(), cfg_.num_experts)));
    MOE_RETURN_IF_ERROR(
        kernels::row_norm_sum(ctx_, saved->u, slot(stats, RouterStatsLayout::kOutputNormSum)));
    MOE_RETURN_IF_ERROR(
        kernels::row_norm_sum(ctx_, out.p_out, slot(stats, RouterStatsLayout::kStateNormSum)));
  }
  return Status::OK();
}

StatusOr<MoeLayerGradInputs> MoeLayer::backward(const MoeLayerGradOutputs& g,
                                                const MoeLayerSaved& saved) {
  const Tensor& d_out = g.d_out;
  const DType act = saved.u.dtype(), f = compute_dtype(act);
  MOE_RETURN_IF_ERROR(check_activation("d_out", d_out, saved.u, act, true));
  MOE_RETURN_IF_ERROR(check_activation("d_p_out", g.d_p_out, saved.u, f, false));
  const bool adam = cfg_.residual == ResidualKind::kAdam;

  MoeLayerGradInputs gi;
  MOE_ASSIGN_OR_RETURN(Tensor du, ctx_.empty_like(saved.u));
  MOE_ASSIGN_OR_RETURN(gi.d_x_base, ctx_.empty_like(saved.u));
  MOE_ASSIGN_OR_RETURN(gi.d_p_in, ctx_.empty(saved.u.shape(), f));
  if (adam) {
    MOE_ASSIGN_OR_RETURN(gi.d_adam_m_in, ctx_.empty(saved.u.shape(), f));
    MOE_ASSIGN_OR_RETURN(gi.d_adam_v_in, ctx_.empty(saved.u.shape(), f));
  } else {
    gi.d_adam_m_in = g.d_adam_m_out;  // passed through unchanged
    gi.d_adam_v_in = g.d_adam_v_out;
  }
  MOE_RETURN_IF_ERROR(kernels::residual_backward(
      ctx_, residual_args_for(cfg_), d_out, {g.d_p_out, g.d_adam_m_out, g.d_adam_v_out}, saved.u,
      {{}, saved.m_out, saved.v_out},
      {gi.d_x_base,
       du,
       {gi.d_p_in, adam ? gi.d_adam_m_in.view() : TensorView(),
        adam ? gi.d_adam_v_in.view() : TensorView()}}));
  if (saved.training && cfg_.output_dropout > 0) {
    MOE_RETURN_IF_ERROR(kernels::dropout_backward(ctx_, du, {}, saved.token_offset,
                                                  saved.output_dropout_rng,
                                                  static_cast<float>(cfg_.output_dropout), du));
  }

  MOE_ASSIGN_OR_RETURN(Tensor d_y_send, ctx_.empty_like(saved.y_send));
  MOE_ASSIGN_OR_RETURN(Tensor d_gate, ctx_.empty_like(saved.router.gate));
  const TensorView omega = omega_ != nullptr ? omega_->value : TensorView();
  const TensorView d_omega = omega_ != nullptr ? omega_->grad : TensorView();
  MOE_RETURN_IF_ERROR(kernels::combine_backward(ctx_, du, saved.y_send, saved.plan.row,
                                                saved.router.gate, omega,
                                                {d_y_send, d_gate, d_omega}));
  MOE_ASSIGN_OR_RETURN(Tensor d_y_rows, dispatcher_.gather_back_backward(d_y_send, saved.plan));
  MOE_ASSIGN_OR_RETURN(Tensor d_rows, experts_.backward(d_y_rows, saved.experts));

  // dL/dy: through the dispatch, the shared experts and the router.
  MOE_ASSIGN_OR_RETURN(gi.d_x_in, dispatcher_.dispatch_backward(d_rows, saved.plan));
  if (shared_ != nullptr) {
    MOE_ASSIGN_OR_RETURN(Tensor d_shared_in, shared_->backward(du, saved.shared));
    MOE_RETURN_IF_ERROR(kernels::add(ctx_, gi.d_x_in, d_shared_in, gi.d_x_in));
  }
  MOE_RETURN_IF_ERROR(
      router_.backward(d_gate, saved.router, g.aux_scale * saved.aux_grad_multiplier, gi.d_x_in));
  if (saved.robust_shift) {
    // Robust: y = x + a p, so dL/dp_in gains a * dL/dy.
    MOE_RETURN_IF_ERROR(kernels::axpy(ctx_, input_shift_for(cfg_), gi.d_x_in, gi.d_p_in));
  }
  return gi;
}

}  // namespace moe
