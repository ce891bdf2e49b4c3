#include "types/moe_config.h"

#include <cmath>

#include "base/check.h"

namespace moe {

double RobustParams::gamma() const {
  const double k = condition();
  return k * (1 - rho) * (1 - rho) * (1 + rho) / lipschitz;
}

double RobustParams::mu() const {
  const double k = condition();
  return k * rho * rho * rho / (k - 1);
}

double RobustParams::alpha() const {
  const double k = condition();
  return rho * rho * rho / ((k - 1) * (1 - rho) * (1 - rho) * (1 + rho));
}

double MoeLayerConfig::effective_mu() const {
  return residual == ResidualKind::kRobust ? robust.mu() : heavy_ball.mu;
}

double MoeLayerConfig::effective_gamma() const {
  return residual == ResidualKind::kRobust ? robust.gamma() : heavy_ball.gamma;
}

const char* residual_kind_name(ResidualKind kind) {
  switch (kind) {
    case ResidualKind::kPlain:
      return "plain";
    case ResidualKind::kHeavyBall:
      return "heavy_ball";
    case ResidualKind::kAdam:
      return "adam";
    case ResidualKind::kRobust:
      return "robust";
  }
  return "?";
}

namespace {

// Each helper returns an error naming `where.field`, the value and the allowed range.
Status require(bool ok, const std::string& where, const char* field, double value,
               const char* range) {
  if (ok) return Status::OK();
  return invalid_argument_error(where, ".", field, " = ", value, " is outside the allowed range ",
                                range);
}

bool finite(double v) { return std::isfinite(v); }

// The residual dynamics' coefficients (heavy ball, Adam, robust).
Status check_residual(const MoeLayerConfig& c, const std::string& where) {
  if (c.residual == ResidualKind::kHeavyBall || c.residual == ResidualKind::kAdam) {
    // Proposition 1: the heavy-ball iteration is stable only for mu in (-1, 1).
    MOE_RETURN_IF_ERROR(require(c.heavy_ball.mu > -1 && c.heavy_ball.mu < 1, where, "heavy_ball.mu",
                                c.heavy_ball.mu, "(-1, 1)"));
    MOE_RETURN_IF_ERROR(require(finite(c.heavy_ball.gamma) && c.heavy_ball.gamma > 0, where,
                                "heavy_ball.gamma", c.heavy_ball.gamma, "(0, inf)"));
  }
  if (c.residual == ResidualKind::kAdam) {
    MOE_RETURN_IF_ERROR(require(c.adam.beta1 >= 0 && c.adam.beta1 < 1, where, "adam.beta1",
                                c.adam.beta1, "[0, 1)"));
    MOE_RETURN_IF_ERROR(require(c.adam.beta2 >= 0 && c.adam.beta2 < 1, where, "adam.beta2",
                                c.adam.beta2, "[0, 1)"));
    MOE_RETURN_IF_ERROR(
        require(finite(c.adam.eps) && c.adam.eps > 0, where, "adam.eps", c.adam.eps, "(0, inf)"));
    MOE_RETURN_IF_ERROR(require(c.adam.kappa >= 0 && c.adam.kappa <= 1, where, "adam.kappa",
                                c.adam.kappa, "[0, 1]"));
    MOE_RETURN_IF_ERROR(require(finite(c.adam.gamma) && c.adam.gamma > 0, where, "adam.gamma",
                                c.adam.gamma, "(0, inf)"));
  }
  if (c.residual == ResidualKind::kRobust) {
    MOE_RETURN_IF_ERROR(
        require(c.robust.rho > 0 && c.robust.rho < 1, where, "robust.rho", c.robust.rho, "(0, 1)"));
    MOE_RETURN_IF_ERROR(require(finite(c.robust.lipschitz) && c.robust.lipschitz > 0, where,
                                "robust.lipschitz", c.robust.lipschitz, "(0, inf)"));
    MOE_RETURN_IF_ERROR(require(finite(c.robust.strong_convexity) && c.robust.strong_convexity > 0,
                                where, "robust.strong_convexity", c.robust.strong_convexity,
                                "(0, inf)"));
    const double k = c.robust.condition();
    if (!(k > 1)) {
      return invalid_argument_error(where, ".robust: k = L/m = ", c.robust.lipschitz, "/",
                                    c.robust.strong_convexity, " = ", k,
                                    " is outside the allowed range (1, inf) (Eq. 17 needs k > 1)");
    }
    const double mu = c.robust.mu();
    if (!(mu < 1)) {
      return invalid_argument_error(where, ".robust: derived mu = k rho^3 / (k - 1) = ", mu,
                                    " is outside the allowed range (-1, 1); lower rho or raise k");
    }
  }
  return Status::OK();
}

// SparseMixer samples one expert from its own masked softmax and scales the gate by its midpoint
// rule (spec/sparsemixer-acmoe.md A.3-A.5): sigmoid scores, unnormalised or scaled gates and
// DeepSeek-V3's sequence loss are not part of that estimator, so they are refused rather than
// ignored. (The AC router only changes the router's input, or its logits: every routing option
// applies to it unchanged.)
Status check_sparsemixer_routing(const MoeLayerConfig& c, const std::string& where) {
  auto refuse = [&](const char* field, const std::string& value) {
    return invalid_argument_error(where, ".", field, " = ", value,
                                  " cannot be used with sparsemixer (SparseMixer routes by its own "
                                  "masked softmax and gate)");
  };
  if (c.score_function != ScoreFunction::kSoftmax) return refuse("score_function", "SIGMOID");
  if (!c.renormalize) return refuse("renormalize", "false");
  if (c.routed_scaling != 1.0) return refuse("routed_scaling", str_cat(c.routed_scaling));
  if (c.seq_balance_loss_coef != 0) {
    return refuse("seq_balance_loss_coef", str_cat(c.seq_balance_loss_coef));
  }
  if (c.bias_update_rate != 0) return refuse("bias_update_rate", str_cat(c.bias_update_rate));
  return Status::OK();
}

// The AC router's and SparseMixer's settings.
Status check_router_variants(const MoeLayerConfig& c, const std::string& where) {
  if (c.ac.enabled) {
    MOE_RETURN_IF_ERROR(
        require(finite(c.ac.eps) && c.ac.eps > 0, where, "ac.eps", c.ac.eps, "(0, inf)"));
    MOE_RETURN_IF_ERROR(require(finite(c.ac.clip_mult) && c.ac.clip_mult >= 1, where,
                                "ac.clip_mult", c.ac.clip_mult, "[1, inf)"));
    MOE_RETURN_IF_ERROR(require(c.ac.min_cluster_size >= 0, where, "ac.min_cluster_size",
                                static_cast<double>(c.ac.min_cluster_size), "[0, inf)"));
  }
  if (c.sparsemixer.enabled) {
    if (c.top_k != 1) {
      return invalid_argument_error(where, ".top_k = ", c.top_k,
                                    " must be 1 with sparsemixer (SparseMixer is defined for "
                                    "top-1 routing)");
    }
    MOE_RETURN_IF_ERROR(require(c.sparsemixer.jitter > 0 && c.sparsemixer.jitter <= 1, where,
                                "sparsemixer.jitter", c.sparsemixer.jitter, "(0, 1]"));
    MOE_RETURN_IF_ERROR(check_sparsemixer_routing(c, where));
  }
  return Status::OK();
}

// Node-limited routing: its M of the expert groups, each group on one EP rank or on whole ranks.
Status check_node_limited(const MoeLayerConfig& c, const std::string& where, int ep_size) {
  if (c.max_ep_ranks == 0) return Status::OK();
  MOE_RETURN_IF_ERROR(
      require(c.max_ep_ranks > 0, where, "max_ep_ranks", c.max_ep_ranks, "[0, inf) (0: any)"));
  if (c.expert_groups < 2 || c.max_ep_ranks > c.expert_groups || c.topk_groups != 0) {
    return invalid_argument_error(
        where, ".max_ep_ranks = ", c.max_ep_ranks, " needs expert_groups >= 2 (the nodes; now ",
        c.expert_groups, "), at most that many kept, and topk_groups unset (now ", c.topk_groups,
        "): node-limited routing keeps max_ep_ranks groups");
  }
  if (c.expert_groups % ep_size != 0 && ep_size % c.expert_groups != 0) {
    return invalid_argument_error(
        where, ".expert_groups = ", c.expert_groups, " does not align with the ", ep_size,
        " expert-parallel ranks: node-limited routing (max_ep_ranks) needs each group on one rank "
        "or on whole ranks, so choose expert_groups a multiple or a divisor of the EP size");
  }
  return Status::OK();
}

// The routing options of current models: their ranges and combinations.
Status check_modern_routing(const MoeLayerConfig& c, const std::string& where, int ep_size) {
  MOE_RETURN_IF_ERROR(require(finite(c.routed_scaling) && c.routed_scaling > 0, where,
                              "routed_scaling", c.routed_scaling, "(0, inf)"));
  MOE_RETURN_IF_ERROR(require(finite(c.seq_balance_loss_coef) && c.seq_balance_loss_coef >= 0,
                              where, "seq_balance_loss_coef", c.seq_balance_loss_coef, "[0, inf)"));
  MOE_RETURN_IF_ERROR(require(finite(c.bias_update_rate) && c.bias_update_rate >= 0, where,
                              "bias_update_rate", c.bias_update_rate, "[0, inf)"));
  MOE_RETURN_IF_ERROR(
      require(c.shared_experts >= 0, where, "shared_experts", c.shared_experts, "[0, inf)"));
  MOE_RETURN_IF_ERROR(require(c.d_shared >= 0, where, "d_shared", c.d_shared, "[0, inf)"));
  if (c.shared_expert_gate && c.shared_experts == 0) {
    return invalid_argument_error(where, ".shared_expert_gate gates the shared experts, but ",
                                  where,
                                  ".shared_experts is 0: set shared_experts >= 1 or drop "
                                  "shared_expert_gate");
  }
  if (c.expert_groups < 1 || c.num_experts % c.expert_groups != 0) {
    return invalid_argument_error(where, ".expert_groups = ", c.expert_groups,
                                  " must be >= 1 and divide num_experts = ", c.num_experts);
  }
  if (c.expert_groups > 64) {
    return invalid_argument_error(where, ".expert_groups = ", c.expert_groups,
                                  " is outside the allowed range [1, 64]");
  }
  if (c.topk_groups < 0 || c.topk_groups > c.expert_groups) {
    return invalid_argument_error(where, ".topk_groups = ", c.topk_groups,
                                  " is outside the allowed range [0, expert_groups = ",
                                  c.expert_groups, "] (0: every group)");
  }
  MOE_RETURN_IF_ERROR(check_node_limited(c, where, ep_size));
  const int64_t kept = c.kept_groups();
  if (c.top_k > kept * (c.num_experts / c.expert_groups)) {
    return invalid_argument_error(where, ".top_k = ", c.top_k, " exceeds the ", kept,
                                  " kept groups' ", kept * (c.num_experts / c.expert_groups),
                                  " experts (topk_groups x num_experts / expert_groups)");
  }
  if (c.expert_groups > 1 && c.sparsemixer.enabled) {
    return invalid_argument_error(where, ".expert_groups = ", c.expert_groups,
                                  " cannot be used with sparsemixer (SparseMixer samples from its "
                                  "own masked softmax over every expert)");
  }
  if (c.bias_update_rate > 0 && c.balance_scope != BalanceScope::kGlobal) {
    // The bias must move identically on every rank: only the global loads are the same there.
    return invalid_argument_error(where, ".bias_update_rate = ", c.bias_update_rate,
                                  " needs balance_scope GLOBAL (loss-free balancing moves the bias "
                                  "by the global batch's loads, the same on every rank)");
  }
  return Status::OK();
}

}  // namespace

Status MoeLayerConfig::validate(const std::string& where, int ep_size) const {
  MOE_RETURN_IF_ERROR(require(d_model >= 1, where, "d_model", d_model, "[1, inf)"));
  MOE_RETURN_IF_ERROR(require(d_expert >= 1, where, "d_expert", d_expert, "[1, inf)"));
  MOE_RETURN_IF_ERROR(require(num_experts >= 1, where, "num_experts", num_experts, "[1, inf)"));
  if (top_k < 1 || top_k > num_experts) {
    return invalid_argument_error(where, ".top_k = ", top_k, " is outside the allowed range [1, ",
                                  "num_experts = ", num_experts, "]");
  }
  if (ep_size < 1 || num_experts % ep_size != 0) {
    return invalid_argument_error(where, ".num_experts = ", num_experts,
                                  " is not divisible by the expert-parallel size ", ep_size);
  }
  if (!dropless) {
    MOE_RETURN_IF_ERROR(require(finite(capacity_factor) && capacity_factor > 0, where,
                                "capacity_factor", capacity_factor, "(0, inf) (or set dropless)"));
  }
  MOE_RETURN_IF_ERROR(require(finite(eval_capacity_factor) && eval_capacity_factor >= 0, where,
                              "eval_capacity_factor", eval_capacity_factor,
                              "[0, inf) (0: no dropping at evaluation)"));
  MOE_RETURN_IF_ERROR(require(expert_dropout >= 0 && expert_dropout < 1, where, "expert_dropout",
                              expert_dropout, "[0, 1)"));
  MOE_RETURN_IF_ERROR(require(output_dropout >= 0 && output_dropout < 1, where, "output_dropout",
                              output_dropout, "[0, 1)"));
  MOE_RETURN_IF_ERROR(require(finite(balance_loss_coef) && balance_loss_coef >= 0, where,
                              "balance_loss_coef", balance_loss_coef, "[0, inf)"));
  MOE_RETURN_IF_ERROR(require(finite(z_loss_coef) && z_loss_coef >= 0, where, "z_loss_coef",
                              z_loss_coef, "[0, inf)"));

  MOE_RETURN_IF_ERROR(check_residual(*this, where));
  MOE_RETURN_IF_ERROR(check_modern_routing(*this, where, ep_size));
  return check_router_variants(*this, where);
}

}  // namespace moe
