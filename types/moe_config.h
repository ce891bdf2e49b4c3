// Plain configuration of one MoE layer: router, capacity, experts, losses and residual dynamics.
// Filled from protobuf by proto/moe_convert.cc and validated once by validate(); layers trust it.
// Every equation these fields select is in spec/momentum-smoe.md and spec/sparsemixer-acmoe.md;
// the choices the papers leave open are named here and recorded with every run.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace moe {

enum class ExpertActivation {
  kRelu,
  kGelu,
  kGeluTanh,
  kSwiglu,  // gated: silu(x W_gate) * (x W_up); the first matrix is [D, 2F] = [gate | up]
};
// True for gated activations, whose first matrix has two halves ([D, 2F]).
inline bool is_gated(ExpertActivation a) { return a == ExpertActivation::kSwiglu; }
// The first matrix's columns for hidden width f: 2f when gated ([gate | up]), else f.
inline int64_t first_matrix_cols(ExpertActivation a, int64_t f) { return is_gated(a) ? 2 * f : f; }

// How the layer output is formed from the residual base x and the SMoE output u.
enum class ResidualKind {
  kPlain,      // x + u                                                      (Eq. 2)
  kHeavyBall,  // MomentumSMoE: p = u + mu p; x + gamma p                    (Eq. 10)
  kAdam,       // AdamSMoE (first MoE layer only)                            (Sec. 3)
  kRobust,     // Robust MomentumSMoE: router and experts see y = x + alpha gamma p (Eq. 18)
};

// Sign convention of the momentum state (spec/momentum-smoe.md 2.3).
enum class MomentumConvention {
  kPaper,          // f = -u: state p, p = u + mu p, out = x + gamma p. mu = 0, gamma = 1 is SMoE.
  kReferenceCode,  // f = +u: buffer m = mu m + gamma u, out = x - m (m == -gamma p).
};

enum class AdamEpsPlacement {
  kOutsideSqrt,  // gamma / (sqrt(v) + eps)   (paper, Sec. 3.1)
  kInsideSqrt,   // gamma / sqrt(v + eps)     (reference code)
};

struct HeavyBallParams {
  double mu = 0.7;     // momentum coefficient, in (-1, 1)
  double gamma = 1.0;  // step size, > 0
};

// AdamSMoE. The output uses the Adam rule; the heavy-ball state handed to later layers is updated
// as a heavy-ball layer would (p = u + mu p), which is what the reference code hands on
// (gamma2 * u_1 in its buffer convention).
struct AdamParams {
  double beta1 = 0.9;    // first-moment decay (the paper's mu in Eq. 3.1), in [0, 1)
  double beta2 = 0.999;  // second-moment decay (the paper's beta), in [0, 1)
  double eps = 1e-8;     // > 0
  AdamEpsPlacement eps_placement = AdamEpsPlacement::kOutsideSqrt;
  double kappa = 0.0;  // weight decay on x, in [0, 1]; the reference code is effectively 1
  double gamma = 1.0;  // Adam step size, > 0
};

// Robust MomentumSMoE, parameterised by (rho, L, m) (Eq. 17; rho is the paper's scalar p).
struct RobustParams {
  double rho = 0.5;               // in (0, 1)
  double lipschitz = 2.0;         // L > 0
  double strong_convexity = 1.0;  // m > 0, with k = L / m > 1
  // Derived by Eq. 17. Valid only after MoeLayerConfig::validate() succeeded.
  double condition() const { return lipschitz / strong_convexity; }
  double gamma() const;
  double mu() const;
  double alpha() const;
};

enum class AcNormalization {
  kPaper,          // per cluster, over the D features: w_k *= D / sum_q w_kq (Lemma 1, Eq. 21)
  kReferenceCode,  // clip at clip_mult * mean(W), then per feature over experts: W[:, q] /= mean_k
};

// How an AC layer's logits come from the transformed token r = y * M (spec B.7, B.9 #11).
enum class AcLogits {
  kLinear,              // r W_r + b_r (momoe's default)
  kUnitNormEmbeddings,  // r W_n, W_n = W_r with unit-norm columns (the experts' embeddings), no
                        // bias: the reference code's XMoE-style AC gate; Eq. 8 has no bias either
};

// Adaptive Clustering router (spec/sparsemixer-acmoe.md B.3, B.7). The metric of a token is the
// one of its previous-layer top-1 cluster; statistics come from this layer's MoE input grouped by
// those labels (the reference code's choice), without gradient.
struct AcRouterParams {
  bool enabled = false;
  AcNormalization normalization = AcNormalization::kPaper;
  double eps = 1e-4;             // added to the mean absolute deviation before inverting, > 0
  double clip_mult = 10.0;       // reference-code clip, >= 1
  int64_t min_cluster_size = 2;  // clusters with fewer tokens use the identity metric and are left
                                 // out of the normalisation; 0 reproduces the reference code
  bool global_stats = false;     // cluster sums all-reduced over the data (DP x EP) ranks
  AcLogits logits = AcLogits::kLinear;
};

enum class SparseMixerMask {
  kPaper,          // keep i iff theta* - theta_i <= r (|theta*| + |theta_i|)
  kReferenceCode,  // keep i iff (theta* - theta_i) <= 2 r max(|theta_i|, theta*) (division-free)
};
enum class SparseMixerMidpoint {
  kPaper,          // every non-argmax sample takes the midpoint (forward scaled by 1/2)
  kReferenceCode,  // a non-argmax sample takes the midpoint with probability 1/2
  kEulerOnly,      // never halve (the paper's ablation-2)
};
enum class SparseMixerGateGrad {
  kReferenceCode,  // dL/dpi_D = 2 s in both branches (SparseMixerCore.backward)
  kPaper,          // dL/dpi_D = (1 + c) s: 2 s when the forward scale c = 1, 1.5 s when c = 1/2
};

// SparseMixer top-1 routing (spec/sparsemixer-acmoe.md A.3-A.5).
struct SparseMixerParams {
  bool enabled = false;
  double jitter = 0.1;  // r, in (0, 1]
  SparseMixerMask mask = SparseMixerMask::kPaper;
  SparseMixerMidpoint midpoint = SparseMixerMidpoint::kPaper;
  SparseMixerGateGrad gate_grad = SparseMixerGateGrad::kReferenceCode;
  bool omega = true;  // trainable per-layer D-vector scale of the expert output, init 1
};

// Over which tokens the load-balancing and z losses are computed.
enum class BalanceScope {
  kLocal,   // this rank's micro-batch (the reference code; depends on how the batch is split)
  kGlobal,  // every data rank's micro-batch: loads, mean probabilities and the token count are
            // all-reduced, so the loss and its gradient do not depend on the EP/DP layout
};

// How router scores come from the logits.
enum class ScoreFunction {
  kSoftmax,  // softmax over the E experts
  kSigmoid,  // sigmoid per expert (DeepSeek-V3); the balance losses use s / sum_e s
};

struct MoeLayerConfig {
  int64_t d_model = 0;            // D
  int64_t d_expert = 0;           // F, expert hidden width
  int64_t num_experts = 0;        // E (global)
  int64_t top_k = 2;              // K
  double capacity_factor = 1.25;  // C = ceil(capacity_factor * T * K / E), > 0
  bool dropless = false;          // size buffers to fit; nothing is dropped
  // Forward passes with training off (evaluation, probes): 0 drops nothing (the default, so
  // perplexity does not depend on the batch size or the EP layout); > 0 uses this capacity factor.
  double eval_capacity_factor = 0.0;
  ExpertActivation activation = ExpertActivation::kRelu;
  double expert_dropout = 0.0;      // inside each expert, after the activation, in [0, 1)
  double output_dropout = 0.0;      // on u before the residual dynamics, in [0, 1)
  double balance_loss_coef = 0.01;  // Switch load-balancing loss weight, >= 0
  double z_loss_coef = 0.0;         // router z-loss weight, >= 0
  BalanceScope balance_scope = BalanceScope::kGlobal;
  // false: no bias in the router and the experts (the model's linear_bias; not set per block)
  bool linear_bias = true;

  // Routing of current models.
  ScoreFunction score_function = ScoreFunction::kSoftmax;
  bool renormalize = true;           // gates = chosen scores / their sum (false: the scores)
  double routed_scaling = 1.0;       // gates *= routed_scaling, > 0
  double seq_balance_loss_coef = 0;  // DeepSeek-V3's sequence-wise balance loss weight, >= 0
  double bias_update_rate = 0;       // loss-free balancing's rate (0 = off), >= 0
  int64_t shared_experts = 0;        // always-active experts, computed where the token is
  int64_t d_shared = 0;              // their hidden width (0 in the file: d_expert)
  bool shared_expert_gate = false;   // Qwen2-MoE: shared output *= sigmoid(y . w_gate)
  int64_t expert_groups = 1;         // group-limited routing: E / expert_groups per group
  int64_t topk_groups = 0;           // groups each token keeps (0 in the file: expert_groups)
  // Node-limited routing (DeepSeek-V3): the expert_groups groups are the nodes; each token keeps
  // max_ep_ranks of them, scored by their ceil(top_k / max_ep_ranks) best scores. Each group lies
  // on one EP rank (a token reaches at most max_ep_ranks ranks) or spans R / expert_groups whole
  // ranks (at most max_ep_ranks such groups of ranks, e.g. hosts). 0 = off.
  int64_t max_ep_ranks = 0;

  ResidualKind residual = ResidualKind::kPlain;
  MomentumConvention convention = MomentumConvention::kPaper;
  HeavyBallParams heavy_ball;
  AdamParams adam;
  RobustParams robust;
  AcRouterParams ac;
  SparseMixerParams sparsemixer;

  // The shared experts' total hidden width: shared_experts x d_shared (d_expert when 0); they
  // compute as one dense FFN of that width. 0 without shared experts.
  int64_t shared_width() const { return shared_experts * (d_shared > 0 ? d_shared : d_expert); }

  // The groups a token keeps: max_ep_ranks (node-limited), else topk_groups, else every group.
  int64_t kept_groups() const {
    return max_ep_ranks > 0 ? max_ep_ranks : topk_groups > 0 ? topk_groups : expert_groups;
  }
  // How many of a group's best scores its score sums: 2 (group-limited), or ceil(top_k /
  // max_ep_ranks) (node-limited).
  int64_t group_top() const {
    return max_ep_ranks > 0 ? (top_k + max_ep_ranks - 1) / max_ep_ranks : 2;
  }

  // Checks every field; the error names the field (prefixed with `where`, e.g. "layers[3].moe")
  // and the allowed range. `ep_size` is the expert-parallel group size (E must divide by it).
  Status validate(const std::string& where = "moe", int ep_size = 1) const;

  // The momentum coefficient and step size in effect (heavy_ball, or derived for kRobust).
  double effective_mu() const;
  double effective_gamma() const;
};

const char* residual_kind_name(ResidualKind kind);

}  // namespace moe
