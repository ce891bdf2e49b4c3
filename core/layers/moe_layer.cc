#include "core/layers/moe_layer.h"

#include "core/layers/init.h"
#include "core/layers/rng_streams.h"
#include "kernels/activation.h"
#include "kernels/moe_dispatch.h"
#include "kernels/router.h"

namespace moe {
namespace {

Tensor token_keys(int64_t tokens, int64_t token_offset) {
  Tensor keys = Tensor::empty({tokens}, DType::kI64);
  for (int64_t t = 0; t < tokens; ++t) keys.data<int64_t>()[t] = token_offset + t;
  return keys;
}

// dst = src, or zeros when src is empty. dst may be empty (nothing to do).
Status copy_or_zero(const TensorView& src, const TensorView& dst) {
  if (dst.numel() == 0) return Status::OK();
  if (src.numel() == 0) return device_memset_zero(dst.raw(), dst.device(), dst.nbytes());
  if (src.shape() != dst.shape() || src.dtype() != dst.dtype()) {
    return invalid_argument_error("moe layer: state ", src.to_string(), " cannot pass to ",
                                  dst.to_string());
  }
  return device_memcpy(dst.raw(), dst.device(), src.raw(), src.device(), src.nbytes());
}

Status check_activation(const char* name, const TensorView& t, const TensorView& like,
                        bool required) {
  if (!required && t.numel() == 0) return Status::OK();
  if (t.shape() != like.shape() || t.dtype() != like.dtype()) {
    return invalid_argument_error("moe layer: ", name, " is ", t.to_string(), ", expected ",
                                  like.to_string());
  }
  return Status::OK();
}

}  // namespace

MoeLayer::MoeLayer(const std::string& prefix, const MoeLayerConfig& cfg, int block, int moe_index,
                   ParameterSet* params, comm::Communicator* ep_comm)
    : cfg_(cfg),
      block_(block),
      moe_index_(moe_index),
      router_(prefix, cfg, params),
      dispatcher_(cfg, ep_comm),
      experts_(prefix, cfg, cfg.num_experts / dispatcher_.ep_size(),
               dispatcher_.first_local_expert(), params) {
  if (cfg.sparsemixer.enabled && cfg.sparsemixer.omega) {
    omega_ = &params->add(prefix + ".omega", {cfg.d_model}, ParamKind::kDense, false);
    // All ones (spec/sparsemixer-acmoe.md A.3), as the model's initialiser also sets it.
    MOE_CHECK(init_constant(omega_->value, 1.0).ok());
  }
}

kernels::ResidualArgs MoeLayer::residual_args() const {
  kernels::ResidualArgs a;
  const bool paper = cfg_.convention == MomentumConvention::kPaper;
  const double mu = cfg_.effective_mu(), gamma = cfg_.effective_gamma();
  switch (cfg_.residual) {
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
      a.beta1 = cfg_.adam.beta1;
      a.beta2 = cfg_.adam.beta2;
      a.eps = cfg_.adam.eps;
      a.eps_inside_sqrt = cfg_.adam.eps_placement == AdamEpsPlacement::kInsideSqrt;
      a.kappa = cfg_.adam.kappa;
      a.gamma = cfg_.adam.gamma;
      a.adam_sign = paper ? 1.0 : -1.0;  // f = -u (paper) or f = +u (Fig. 12, reference code)
      break;
  }
  return a;
}

double MoeLayer::input_shift() const {
  if (cfg_.residual != ResidualKind::kRobust) return 0.0;
  // y = x + alpha gamma p (paper); with m = -gamma p: y = x - alpha m (reference code).
  const double alpha = cfg_.robust.alpha();
  return cfg_.convention == MomentumConvention::kPaper ? alpha * cfg_.robust.gamma() : -alpha;
}

Status MoeLayer::forward(const MoeLayerInputs& in, const MoeLayerOutputs& out,
                         MoeLayerSaved* saved, RouterStatsInfo* stats) {
  const TensorView& x = in.x_in;
  if (x.ndim() != 2 || x.dim(1) != cfg_.d_model) {
    return invalid_argument_error("moe layer (block ", block_, "): input ", x.to_string(),
                                  " is not [T, ", cfg_.d_model, "]");
  }
  const int64_t tokens = x.dim(0), d = cfg_.d_model;
  MOE_RETURN_IF_ERROR(check_activation("x_base", in.x_base, x, true));
  MOE_RETURN_IF_ERROR(check_activation("p_in", in.p_in, x, false));
  MOE_RETURN_IF_ERROR(check_activation("adam_m_in", in.adam_m_in, x, false));
  MOE_RETURN_IF_ERROR(check_activation("adam_v_in", in.adam_v_in, x, false));
  MOE_RETURN_IF_ERROR(check_activation("out", out.out, x, true));
  MOE_RETURN_IF_ERROR(check_activation("p_out", out.p_out, x, true));
  MOE_RETURN_IF_ERROR(check_activation("adam_m_out", out.adam_m_out, x, false));
  MOE_RETURN_IF_ERROR(check_activation("adam_v_out", out.adam_v_out, x, false));
  saved->training = in.training;
  saved->token_offset = in.token_offset;
  saved->output_dropout_rng = site_rng(in.seed, RandomSite::kMoeOut, block_, in.step);

  // Robust: the router and the experts see y = x + alpha gamma p; the residual base stays x.
  TensorView y = x;
  saved->y = Tensor();
  if (cfg_.residual == ResidualKind::kRobust && in.p_in.numel() > 0) {
    saved->y = Tensor::empty({tokens, d}, x.dtype());
    MOE_RETURN_IF_ERROR(kernels::residual_shift_input(x, in.p_in, input_shift(), saved->y));
    y = saved->y;
  }

  RouterForwardArgs route{y, in.prev_top1, in.training,
                          site_rng(in.seed, RandomSite::kSparseMixer, block_, in.step),
                          in.token_offset, in.stats_comm};
  MOE_RETURN_IF_ERROR(router_.forward(route, &saved->router, stats));
  MOE_RETURN_IF_ERROR(dispatcher_.plan(saved->router.idx, in.token_offset, &saved->plan));
  const DispatchPlan& plan = saved->plan;

  Tensor compact;
  MOE_RETURN_IF_ERROR(dispatcher_.dispatch(y, plan, &compact));
  Tensor compact_keys = Tensor::empty({compact.dim(0)}, DType::kI64);
  MOE_RETURN_IF_ERROR(kernels::gather_rows(plan.recv_key.view().reshape({plan.recv_key.numel(), 1}),
                                           plan.compact_rows,
                                           compact_keys.view().reshape({compact.dim(0), 1})));
  Tensor y_compact = Tensor::empty({compact.dim(0), d}, x.dtype());
  const float expert_p = in.training ? static_cast<float>(cfg_.expert_dropout) : 0.f;
  MOE_RETURN_IF_ERROR(experts_.forward(compact, plan.expert_offsets, compact_keys,
                                       site_rng(in.seed, RandomSite::kExpertHidden, block_, in.step),
                                       expert_p, y_compact, &saved->experts));
  MOE_RETURN_IF_ERROR(dispatcher_.gather_back(y_compact, plan, &saved->y_send));

  saved->u = Tensor::empty({tokens, d}, x.dtype());
  const TensorView omega = omega_ != nullptr ? omega_->value.view() : TensorView();
  MOE_RETURN_IF_ERROR(
      kernels::combine(saved->y_send, plan.row, saved->router.gate, omega, saved->u));
  if (in.training && cfg_.output_dropout > 0) {
    MOE_RETURN_IF_ERROR(kernels::dropout_forward(saved->u, token_keys(tokens, in.token_offset),
                                                 saved->output_dropout_rng,
                                                 static_cast<float>(cfg_.output_dropout),
                                                 saved->u));
  }

  const kernels::ResidualArgs args = residual_args();
  const bool adam = cfg_.residual == ResidualKind::kAdam;
  if (adam) {
    saved->m_out = Tensor::empty({tokens, d}, x.dtype());
    saved->v_out = Tensor::empty({tokens, d}, x.dtype());
  }
  MOE_RETURN_IF_ERROR(kernels::residual_forward(
      args, in.x_base, saved->u, in.p_in, in.adam_m_in, in.adam_v_in, out.out, out.p_out,
      adam ? saved->m_out.view() : TensorView(), adam ? saved->v_out.view() : TensorView()));
  MOE_RETURN_IF_ERROR(copy_or_zero(adam ? saved->m_out.view() : in.adam_m_in, out.adam_m_out));
  MOE_RETURN_IF_ERROR(copy_or_zero(adam ? saved->v_out.view() : in.adam_v_in, out.adam_v_out));
  if (out.top1.numel() > 0) MOE_RETURN_IF_ERROR(copy_or_zero(saved->router.top1, out.top1));

  MOE_ASSIGN_OR_RETURN(double aux,
                       router_.aux_loss(plan.load, in.stats_comm, &saved->router, stats));
  saved->aux_loss = aux;
  saved->aux_grad_multiplier =
      (cfg_.balance_scope == BalanceScope::kGlobal && in.stats_comm != nullptr)
          ? static_cast<double>(in.stats_comm->world_size())
          : 1.0;
  if (stats != nullptr) {
    stats->block = block_;
    stats->moe_index = moe_index_;
    stats->tokens += tokens;
    stats->slots += tokens * cfg_.top_k;
    stats->expert_load.resize(cfg_.num_experts, 0);
    for (int64_t e = 0; e < cfg_.num_experts; ++e) stats->expert_load[e] += plan.load.data<int64_t>()[e];
    stats->dropped_slots += plan.dropped_slots;
    stats->fully_dropped_tokens += plan.fully_dropped_tokens;
    MOE_ASSIGN_OR_RETURN(double u_norm, kernels::row_norm_sum(saved->u));
    MOE_ASSIGN_OR_RETURN(double p_norm, kernels::row_norm_sum(out.p_out));
    stats->output_norm_sum += u_norm;
    stats->state_norm_sum += p_norm;
  }
  return Status::OK();
}

Status MoeLayer::backward(const MoeLayerGradOutputs& g, const MoeLayerSaved& saved,
                          const MoeLayerGradInputs& gi) {
  const TensorView& d_out = g.d_out;
  const int64_t tokens = d_out.dim(0), d = cfg_.d_model;
  MOE_RETURN_IF_ERROR(check_activation("d_out", d_out, saved.u, true));
  MOE_RETURN_IF_ERROR(check_activation("d_x_in", gi.d_x_in, saved.u, true));
  MOE_RETURN_IF_ERROR(check_activation("d_x_base", gi.d_x_base, saved.u, true));
  MOE_RETURN_IF_ERROR(check_activation("d_p_in", gi.d_p_in, saved.u, true));
  const bool adam = cfg_.residual == ResidualKind::kAdam;

  Tensor du = Tensor::empty({tokens, d}, d_out.dtype());
  MOE_RETURN_IF_ERROR(kernels::residual_backward(
      residual_args(), d_out, g.d_p_out, g.d_adam_m_out, g.d_adam_v_out, saved.u, saved.m_out,
      saved.v_out, gi.d_x_base, du, gi.d_p_in, adam ? gi.d_adam_m_in : TensorView(),
      adam ? gi.d_adam_v_in : TensorView()));
  if (!adam) {
    // Layers other than Adam pass the moments through unchanged.
    MOE_RETURN_IF_ERROR(copy_or_zero(g.d_adam_m_out, gi.d_adam_m_in));
    MOE_RETURN_IF_ERROR(copy_or_zero(g.d_adam_v_out, gi.d_adam_v_in));
  }
  if (saved.training && cfg_.output_dropout > 0) {
    MOE_RETURN_IF_ERROR(kernels::dropout_backward(du, token_keys(tokens, saved.token_offset),
                                                  saved.output_dropout_rng,
                                                  static_cast<float>(cfg_.output_dropout), du));
  }

  Tensor d_y_send = Tensor::empty(saved.y_send.shape(), d_out.dtype());
  Tensor d_gate = Tensor::empty(saved.router.gate.shape(), d_out.dtype());
  const TensorView omega = omega_ != nullptr ? omega_->value.view() : TensorView();
  const TensorView d_omega = omega_ != nullptr ? omega_->grad.view() : TensorView();
  MOE_RETURN_IF_ERROR(kernels::combine_backward(du, saved.y_send, saved.plan.row,
                                                saved.router.gate, omega, d_y_send, d_gate,
                                                d_omega));
  Tensor d_y_compact;
  MOE_RETURN_IF_ERROR(dispatcher_.gather_back_backward(d_y_send, saved.plan, &d_y_compact));
  Tensor d_compact = Tensor::empty(d_y_compact.shape(), d_out.dtype());
  const float expert_p = saved.training ? static_cast<float>(cfg_.expert_dropout) : 0.f;
  MOE_RETURN_IF_ERROR(experts_.backward(d_y_compact, saved.experts, expert_p, d_compact));

  // dL/dy: through the dispatch and through the router.
  MOE_RETURN_IF_ERROR(device_memset_zero(gi.d_x_in.raw(), gi.d_x_in.device(), gi.d_x_in.nbytes()));
  MOE_RETURN_IF_ERROR(dispatcher_.dispatch_backward(d_compact, saved.plan, gi.d_x_in));
  MOE_RETURN_IF_ERROR(
      router_.backward(d_gate, saved.router, g.aux_scale * saved.aux_grad_multiplier, gi.d_x_in));
  if (saved.y.numel() > 0) {
    // Robust: y = x + a p, so dL/dp_in gains a * dL/dy.
    Tensor shifted = Tensor::empty({tokens, d}, d_out.dtype());
    MOE_RETURN_IF_ERROR(
        kernels::residual_shift_input(gi.d_p_in, gi.d_x_in, input_shift(), shifted));
    MOE_RETURN_IF_ERROR(device_memcpy(gi.d_p_in.raw(), gi.d_p_in.device(), shifted.raw(),
                                      shifted.device(), shifted.nbytes()));
  }
  return Status::OK();
}

}  // namespace moe
