// Finite-difference checks (f64) of the whole MoE layer for every routing and residual variant:
// router weights through top-k and softmax or sigmoid gates (renormalised or not, scaled), the
// balance, z and sequence-wise balance losses, a router without bias, capacity drops, dropout,
// the momentum, Adam and robust state, the AC router's parameters, SparseMixer's experts and
// omega, SwiGLU and bias-free experts, shared experts (also gated). Gradients w.r.t. the inputs are
// checked wherever the layer's gradient is the true one (the AC metric and SparseMixer's estimator
// are deliberately not; see their own tests).
#include <gtest/gtest.h>

#include <functional>

#include "tests/core/moe_layer_test_util.h"
#include "tests/testing/cross_path.h"

namespace moe::testing {
namespace {

struct Variant {
  std::string name;
  std::function<void(MoeLayerConfig*)> configure;
  std::function<void(LayerHarness*)> setup = nullptr;
  bool check_inputs = true;
  std::vector<std::string> skip_params = {};
  int64_t tokens = 7;
};

// Sequences of `seq_len` tokens (for the sequence-wise balance loss), with an aux loss weight.
std::function<void(LayerHarness*)> in_sequences(int64_t seq_len, double aux_scale) {
  return [seq_len, aux_scale](LayerHarness* h) {
    h->seq_len = seq_len;
    h->aux_scale = aux_scale;
  };
}

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

MoeLayerConfig heavy_ball(double mu, double gamma, MomentumConvention conv) {
  MoeLayerConfig cfg = small_config();
  cfg.residual = ResidualKind::kHeavyBall;
  cfg.heavy_ball = {mu, gamma};
  cfg.convention = conv;
  return cfg;
}

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"plain", [](MoeLayerConfig*) {}});
  v.push_back({"heavy_ball_paper",
               [](MoeLayerConfig* c) { *c = heavy_ball(0.7, 1.0, MomentumConvention::kPaper); }});
  v.push_back({"heavy_ball_negative_mu",
               [](MoeLayerConfig* c) { *c = heavy_ball(-0.3, 0.8, MomentumConvention::kPaper); }});
  v.push_back({"heavy_ball_reference_code", [](MoeLayerConfig* c) {
                 *c = heavy_ball(0.7, 1.2, MomentumConvention::kReferenceCode);
               }});
  v.push_back({"adam_paper_eps_outside",
               [](MoeLayerConfig* c) {
                 c->residual = ResidualKind::kAdam;
                 c->adam.kappa = 0.3;
                 c->adam.gamma = 0.9;
               },
               [](LayerHarness* h) { h->with_adam_state = true; }});
  v.push_back({"adam_paper_eps_inside_no_state",
               [](MoeLayerConfig* c) {
                 c->residual = ResidualKind::kAdam;
                 c->adam.eps_placement = AdamEpsPlacement::kInsideSqrt;
                 c->adam.eps = 1e-3;
               },
               [](LayerHarness* h) { h->with_state = false; }});
  v.push_back({"adam_reference_code",
               [](MoeLayerConfig* c) {
                 c->residual = ResidualKind::kAdam;
                 c->convention = MomentumConvention::kReferenceCode;
                 c->adam.eps_placement = AdamEpsPlacement::kInsideSqrt;
                 c->adam.kappa = 1.0;
               },
               [](LayerHarness* h) { h->with_adam_state = true; }});
  v.push_back({"robust_paper", [](MoeLayerConfig* c) {
                 c->residual = ResidualKind::kRobust;
                 c->robust = {0.5, 2.0, 1.0};
               }});
  v.push_back({"robust_reference_code", [](MoeLayerConfig* c) {
                 c->residual = ResidualKind::kRobust;
                 c->convention = MomentumConvention::kReferenceCode;
                 c->robust = {0.4, 3.0, 1.0};
               }});
  v.push_back({"capacity_drops", [](MoeLayerConfig* c) { c->capacity_factor = 0.6; }});
  v.push_back({"dropless_heavy_ball", [](MoeLayerConfig* c) {
                 *c = heavy_ball(0.7, 1.0, MomentumConvention::kPaper);
                 c->dropless = true;
               }});
  v.push_back({"pre_ln_separate_base",
               [](MoeLayerConfig* c) { *c = heavy_ball(0.5, 1.0, MomentumConvention::kPaper); },
               [](LayerHarness* h) { h->separate_base = true; }});
  v.push_back({"dropout", [](MoeLayerConfig* c) {
                 *c = heavy_ball(0.7, 1.0, MomentumConvention::kPaper);
                 c->expert_dropout = 0.3;
                 c->output_dropout = 0.2;
               }});
  v.push_back({"relu_top1_three_experts", [](MoeLayerConfig* c) {
                 c->activation = ExpertActivation::kRelu;
                 c->num_experts = 3;
                 c->top_k = 1;
               }});
  // SwiGLU experts ([D, 2F] first matrices), with biases and without; bias-free GELU experts
  // with capacity drops and dropout (padding rows and dropped slots without a bias to zero them).
  v.push_back(
      {"swiglu_experts", [](MoeLayerConfig* c) { c->activation = ExpertActivation::kSwiglu; }});
  v.push_back({"swiglu_bias_free_dropout_momentum", [](MoeLayerConfig* c) {
                 *c = heavy_ball(0.7, 1.0, MomentumConvention::kPaper);
                 c->activation = ExpertActivation::kSwiglu;
                 c->linear_bias = false;
                 c->expert_dropout = 0.3;
               }});
  v.push_back({"swiglu_bias_free_dropless", [](MoeLayerConfig* c) {
                 c->activation = ExpertActivation::kSwiglu;
                 c->linear_bias = false;
                 c->dropless = true;
               }});
  // Shared experts (one dense FFN beside the routed ones, gate 1): SwiGLU, bias-free, with hidden
  // and output dropout under the robust shift (their input is the shifted y); ReLU with biases
  // and capacity drops.
  v.push_back({"shared_swiglu_bias_free_robust_dropout", [](MoeLayerConfig* c) {
                 c->residual = ResidualKind::kRobust;
                 c->activation = ExpertActivation::kSwiglu;
                 c->linear_bias = false;
                 c->shared_experts = 2;
                 c->d_shared = 3;
                 c->expert_dropout = 0.25;
                 c->output_dropout = 0.2;
               }});
  // Group-limited routing (2 groups of 2, the better one kept) with a loss-free bias and sigmoid
  // scores: the gates' gradient follows the chosen experts; the bias gets none.
  v.push_back({"sigmoid_groups_score_bias", [](MoeLayerConfig* c) {
                 c->score_function = ScoreFunction::kSigmoid;
                 c->expert_groups = 2;
                 c->topk_groups = 1;
                 c->bias_update_rate = 0.01;
               }});
  // Node-limited routing (2 groups of 2; a token keeps the group of larger top-2 sum and routes
  // both its choices there).
  v.push_back({"node_limited_sigmoid", [](MoeLayerConfig* c) {
                 c->score_function = ScoreFunction::kSigmoid;
                 c->expert_groups = 2;
                 c->max_ep_ranks = 1;
               }});
  v.push_back({"shared_relu_capacity_drops", [](MoeLayerConfig* c) {
                 c->shared_experts = 1;
                 c->capacity_factor = 0.6;
               }});
  // Qwen2-MoE: a SwiGLU shared expert scaled by sigmoid(y w_gate), softmax gates not
  // renormalised, with hidden and output dropout (w_gate's gradient and the gate's share of dy).
  v.push_back({"shared_gated_qwen2_dropout", [](MoeLayerConfig* c) {
                 c->activation = ExpertActivation::kSwiglu;
                 c->linear_bias = false;
                 c->renormalize = false;
                 c->shared_experts = 1;
                 c->d_shared = 5;
                 c->shared_expert_gate = true;
                 c->expert_dropout = 0.25;
                 c->output_dropout = 0.2;
               }});
  v.push_back({"bias_free_capacity_drops", [](MoeLayerConfig* c) {
                 c->linear_bias = false;
                 c->capacity_factor = 0.6;
                 c->expert_dropout = 0.2;
               }});
  v.push_back({"aux_loss_scaled",
               [](MoeLayerConfig* c) {
                 c->balance_loss_coef = 0.7;
                 c->z_loss_coef = 0.2;
               },
               [](LayerHarness* h) { h->aux_scale = 2.5; }});
  // Routing of current models: sigmoid or softmax scores, gates renormalised or not and scaled,
  // DeepSeek-V3's sequence-wise balance loss (its counts are constants, like the Switch loads),
  // a router without bias.
  v.push_back({"sigmoid_renormalized_scaled", [](MoeLayerConfig* c) {
                 c->score_function = ScoreFunction::kSigmoid;
                 c->routed_scaling = 2.5;
               }});
  v.push_back({"sigmoid_unnormalized_scaled_heavy_ball", [](MoeLayerConfig* c) {
                 *c = heavy_ball(0.7, 1.0, MomentumConvention::kPaper);
                 c->score_function = ScoreFunction::kSigmoid;
                 c->renormalize = false;
                 c->routed_scaling = 1.7;
               }});
  v.push_back({"softmax_unnormalized_scaled", [](MoeLayerConfig* c) {
                 c->renormalize = false;
                 c->routed_scaling = 2.0;
               }});
  v.push_back({"sigmoid_scaled_sequence_loss",
               [](MoeLayerConfig* c) {
                 c->score_function = ScoreFunction::kSigmoid;
                 c->routed_scaling = 2.5;
                 c->seq_balance_loss_coef = 0.3;
               },
               in_sequences(4, 1.5),
               true,
               {},
               8});
  v.push_back({"softmax_unnormalized_sequence_loss_only",
               [](MoeLayerConfig* c) {
                 c->renormalize = false;
                 c->balance_loss_coef = 0;
                 c->z_loss_coef = 0;
                 c->seq_balance_loss_coef = 0.4;
               },
               in_sequences(3, 2.0),
               true,
               {},
               9});
  v.push_back({"bias_free_router", [](MoeLayerConfig* c) { c->linear_bias = false; }});
  // AC: no gradient through the metric by design, so the finite difference w.r.t. the input
  // (which moves the metric) is not the layer's gradient. The metric does not depend on the
  // parameters, so every parameter is checked.
  v.push_back({"ac_paper", [](MoeLayerConfig* c) { c->ac.enabled = true; }, nullptr, false});
  v.push_back({"ac_reference_code_momentum",
               [](MoeLayerConfig* c) {
                 *c = heavy_ball(0.7, 1.0, MomentumConvention::kPaper);
                 c->ac.enabled = true;
                 c->ac.normalization = AcNormalization::kReferenceCode;
                 c->ac.min_cluster_size = 0;
               },
               nullptr, false});
  // The reference code's AC gate: unit-norm expert embeddings, no bias (the router weight's
  // gradient goes through the normalisation).
  v.push_back({"ac_unit_norm_embeddings_momentum",
               [](MoeLayerConfig* c) {
                 *c = heavy_ball(0.7, 1.0, MomentumConvention::kPaper);
                 c->ac.enabled = true;
                 c->ac.logits = AcLogits::kUnitNormEmbeddings;
               },
               nullptr, false});
  v.push_back({"ac_sigmoid_bias_free_sequence_loss",
               [](MoeLayerConfig* c) {
                 c->ac.enabled = true;
                 c->linear_bias = false;
                 c->score_function = ScoreFunction::kSigmoid;
                 c->seq_balance_loss_coef = 0.2;
               },
               in_sequences(4, 1.0),
               false,
               {},
               8});
  // SparseMixer: experts and omega get true gradients for the sampled routing; the router gets
  // the documented estimator (tested by hand in sparsemixer_layer_test).
  v.push_back({"sparsemixer_experts_and_omega",
               [](MoeLayerConfig* c) {
                 c->top_k = 1;
                 c->sparsemixer.enabled = true;
                 c->sparsemixer.jitter = 0.5;
                 c->balance_loss_coef = 0;
                 c->z_loss_coef = 0;
               },
               nullptr,
               false,
               {"router"}});
  return v;
}

class MoeLayerGradTest : public ::testing::TestWithParam<Variant> {};

TEST_P(MoeLayerGradTest, MatchesFiniteDifferences) {
  const Variant& variant = GetParam();
  MoeLayerConfig cfg = small_config();
  variant.configure(&cfg);
  ASSERT_TRUE(cfg.validate().ok()) << cfg.validate().to_string();
  LayerHarness h(cfg, variant.tokens, /*fill_seed=*/42);
  if (variant.setup) variant.setup(&h);

  Tensor d_x, d_x_base, d_p_in, d_m_in, d_v_in;
  h.backward(&d_x, &d_x_base, &d_p_in, &d_m_in, &d_v_in);

  std::vector<GradTarget> targets = h.param_targets(variant.skip_params);
  if (variant.check_inputs) {
    targets.push_back({"x", h.x, d_x});
    if (h.separate_base) targets.push_back({"x_base", h.x_base, d_x_base});
    if (h.with_state) targets.push_back({"p_in", h.p_in, d_p_in});
    if (h.with_adam_state) {
      targets.push_back({"adam_m_in", h.m_in, d_m_in});
      targets.push_back({"adam_v_in", h.v_in, d_v_in});
    }
  }
  auto loss = [&h]() {
    MoeLayerSaved saved;
    return h.forward(&saved);
  };
  std::vector<std::string> failures = check_gradients(loss, targets);
  for (const std::string& f : failures) ADD_FAILURE() << variant.name << ": " << f;
}

INSTANTIATE_TEST_SUITE_P(AllVariants, MoeLayerGradTest, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                           return info.param.name;
                         });

// The AC router's input gradient with a single cluster: r = y ⊙ m, so the layer must equal a
// standard layer whose router weight is diag(m) W, with no gradient through m.
TEST(MoeLayerAcGradTest, InputGradientTreatsMetricAsConstant) {
  MoeLayerConfig cfg = small_config();
  cfg.ac.enabled = true;
  LayerHarness ac(cfg, 6, 7);
  for (int64_t t = 0; t < ac.tokens; ++t) ac.prev_top1.data<int32_t>()[t] = 2;
  MoeLayerSaved saved;
  ac.forward(&saved);
  ASSERT_TRUE(saved.router.ac_applied);
  const double* m = saved.router.metric.data<double>() + 2 * cfg.d_model;

  MoeLayerConfig plain_cfg = small_config();
  LayerHarness plain(plain_cfg, 6, 7);  // same parameters and inputs
  Parameter* w = plain.params->find("moe.w_router");
  for (int64_t q = 0; q < cfg.d_model; ++q)
    for (int64_t e = 0; e < cfg.num_experts; ++e)
      w->value.data<double>()[q * cfg.num_experts + e] *= m[q];

  // Two paths to the same logits ((y m) W and y (m W) round differently): cross-path equality
  // (tests/testing/cross_path.h): the routing decisions first, then the gradient within
  // kF64LayerTolerance.
  MoeLayerSaved plain_saved;
  plain.forward(&plain_saved);
  EXPECT_TRUE(same_decisions("AC vs plain routing", saved.router.idx, plain_saved.router.idx));
  Tensor dx_ac, dx_plain, unused1, unused2, unused3, unused4;
  ac.backward(&dx_ac, &unused1, &unused2, &unused3, &unused4);
  plain.backward(&dx_plain, &unused1, &unused2, &unused3, &unused4);
  EXPECT_TRUE(values_within("dL/dx", dx_ac, dx_plain, kF64LayerTolerance));
  // And the standard layer's input gradient is the true one.
  std::vector<std::string> failures = check_gradients(
      [&]() {
        MoeLayerSaved s;
        return plain.forward(&s);
      },
      {{"x", plain.x, dx_plain}});
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

// AC logits with unit-norm expert embeddings and no bias, by hand: s_te = sum_q r_tq W_qe /
// ||W_:e||, whatever the bias holds.
TEST(MoeLayerAcGradTest, UnitNormLogitsWithoutBiasMatchAHandComputation) {
  MoeLayerConfig cfg = small_config();
  cfg.ac.enabled = true;
  cfg.ac.logits = AcLogits::kUnitNormEmbeddings;
  LayerHarness h(cfg, 6, 11);
  Parameter* b = h.params->find("moe.b_router");
  for (int64_t e = 0; e < cfg.num_experts; ++e) b->value.data<double>()[e] = 0.5 + e;
  MoeLayerSaved saved;
  h.forward(&saved);
  ASSERT_TRUE(saved.router.ac_applied);
  ASSERT_TRUE(saved.router.unit_norm);
  const double* w = h.params->find("moe.w_router")->value.data<double>();
  const double* r = saved.router.router_input.data<double>();
  const double* s = saved.router.logits.data<double>();
  const int64_t d = cfg.d_model, experts = cfg.num_experts;
  for (int64_t e = 0; e < experts; ++e) {
    double norm = 0;
    for (int64_t q = 0; q < d; ++q) norm += w[q * experts + e] * w[q * experts + e];
    norm = std::sqrt(norm);
    ASSERT_GT(norm, 0);
    for (int64_t t = 0; t < h.tokens; ++t) {
      double want = 0;
      for (int64_t q = 0; q < d; ++q) want += r[t * d + q] * w[q * experts + e] / norm;
      EXPECT_NEAR(s[t * experts + e], want, 1e-12) << "token " << t << " expert " << e;
    }
  }
}

}  // namespace
}  // namespace moe::testing
