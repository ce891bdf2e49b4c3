// Configuration parsing and validation: every documented range is enforced with an error that
// names the field and the range; text-format errors name the position; nothing crashes.
#include "proto/moe_convert.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

const char* kBase = "d_model: 8 d_expert: 16 num_experts: 4 ";

StatusOr<MoeLayerConfig> parse(const std::string& extra, int ep = 1) {
  return parse_moe_config_text(std::string(kBase) + extra, "layers[2].moe", ep);
}

void expect_error(const std::string& extra, const std::string& needle, int ep = 1) {
  StatusOr<MoeLayerConfig> c = parse(extra, ep);
  ASSERT_FALSE(c.ok()) << "accepted: " << extra;
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(needle), std::string::npos)
      << "for '" << extra << "' got: " << c.status().message();
}

TEST(MoeConfigTest, DefaultsAndRoundTrip) {
  StatusOr<MoeLayerConfig> c = parse("");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->top_k, 2);
  EXPECT_DOUBLE_EQ(c->capacity_factor, 1.25);
  EXPECT_EQ(c->residual, ResidualKind::kPlain);
  EXPECT_DOUBLE_EQ(c->heavy_ball.mu, 0.7);

  c = parse(
      "residual: ROBUST convention: REFERENCE_CODE robust { rho: 0.3 lipschitz: 4 } "
      "ac { enabled: true normalization: REFERENCE_CODE min_cluster_size: 0 } "
      "activation: GELU dropless: true z_loss_coef: 0.001");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  StatusOr<MoeLayerConfig> back = parse_moe_config_text(moe_config_to_text(*c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(moe_config_to_text(*back), moe_config_to_text(*c));
  EXPECT_EQ(back->residual, ResidualKind::kRobust);
  EXPECT_EQ(back->convention, MomentumConvention::kReferenceCode);
  EXPECT_DOUBLE_EQ(back->robust.rho, 0.3);
  EXPECT_EQ(back->ac.min_cluster_size, 0);
  EXPECT_TRUE(back->dropless);
}

TEST(MoeConfigTest, AdamReferenceCodePreset) {
  StatusOr<MoeLayerConfig> c = parse("residual: ADAM adam { reference_code: true }");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->adam.eps_placement, AdamEpsPlacement::kInsideSqrt);
  EXPECT_DOUBLE_EQ(c->adam.kappa, 1.0);
  c = parse("residual: ADAM adam { reference_code: true kappa: 0.5 }");  // explicit wins
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->adam.kappa, 0.5);
}

TEST(MoeConfigTest, RejectsOutOfRangeValuesNamingFieldAndRange) {
  expect_error("top_k: 5",
               "layers[2].moe.top_k = 5 is outside the allowed range [1, num_experts = 4]");
  expect_error("top_k: 0", "top_k = 0");
  expect_error("capacity_factor: 0",
               "layers[2].moe.capacity_factor = 0 is outside the allowed range (0, inf)");
  expect_error("capacity_factor: -1", "capacity_factor = -1");
  expect_error("residual: HEAVY_BALL heavy_ball { mu: 1 }",
               "heavy_ball.mu = 1 is outside the allowed range (-1, 1)");
  expect_error("residual: HEAVY_BALL heavy_ball { mu: -1.5 }", "heavy_ball.mu = -1.5");
  expect_error("residual: HEAVY_BALL heavy_ball { gamma: 0 }", "heavy_ball.gamma = 0");
  expect_error("residual: ROBUST robust { rho: 1 }",
               "robust.rho = 1 is outside the allowed range (0, 1)");
  expect_error("residual: ROBUST robust { lipschitz: 1 strong_convexity: 1 }",
               "k = L/m = 1/1 = 1 is outside the allowed range (1, inf)");
  expect_error("residual: ROBUST robust { lipschitz: 0.5 strong_convexity: 1 }", "k = L/m");
  expect_error("residual: ROBUST robust { rho: 0.95 lipschitz: 1.5 }", "derived mu");
  expect_error("residual: ADAM adam { beta2: 1 }", "adam.beta2 = 1");
  expect_error("residual: ADAM adam { eps: 0 }", "adam.eps = 0");
  expect_error("residual: ADAM adam { kappa: 2 }", "adam.kappa = 2");
  expect_error("expert_dropout: 1", "expert_dropout = 1");
  expect_error("balance_loss_coef: -0.1", "balance_loss_coef = -0.1");
  expect_error("ac { enabled: true eps: 0 }", "ac.eps = 0");
  expect_error("ac { enabled: true clip_mult: 0.5 }", "ac.clip_mult = 0.5");
  expect_error("sparsemixer { enabled: true }", "must be 1 with sparsemixer");
  expect_error("top_k: 1 sparsemixer { enabled: true jitter: 0 }", "sparsemixer.jitter = 0");
  expect_error("", "num_experts = 4 is not divisible by the expert-parallel size 3", 3);
  StatusOr<MoeLayerConfig> c = parse_moe_config_text("num_experts: 4", "moe");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("moe.d_model = 0"), std::string::npos);
  // A dropless layer ignores the capacity factor.
  EXPECT_TRUE(parse("dropless: true capacity_factor: 0").ok());
}

// DeepSeek-V3's and Qwen-MoE's routing parse, round-trip and validate; SparseMixer, which routes
// by its own masked softmax and gate, refuses them; the AC router takes them.
TEST(MoeConfigTest, RoutingOfCurrentModels) {
  StatusOr<MoeLayerConfig> c = parse(
      "score_function: SIGMOID renormalize: false routed_scaling: 2.5 "
      "seq_balance_loss_coef: 0.001");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->score_function, ScoreFunction::kSigmoid);
  EXPECT_FALSE(c->renormalize);
  EXPECT_DOUBLE_EQ(c->routed_scaling, 2.5);
  EXPECT_DOUBLE_EQ(c->seq_balance_loss_coef, 0.001);
  StatusOr<MoeLayerConfig> back = parse_moe_config_text(moe_config_to_text(*c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(moe_config_to_text(*back), moe_config_to_text(*c));
  EXPECT_TRUE(
      parse("ac { enabled: true } score_function: SIGMOID seq_balance_loss_coef: 0.01").ok());
  expect_error("routed_scaling: 0", "routed_scaling = 0");
  // Qwen2-MoE's gated shared expert: a round trip keeps it; without shared experts it is refused.
  c = parse("shared_experts: 1 d_shared: 8 shared_expert_gate: true renormalize: false");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(c->shared_expert_gate);
  back = parse_moe_config_text(moe_config_to_text(*c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->shared_expert_gate);
  expect_error("shared_expert_gate: true", "shared_experts is 0: set shared_experts >= 1");
  expect_error("seq_balance_loss_coef: -1", "seq_balance_loss_coef = -1");
  const std::string sm = "top_k: 1 sparsemixer { enabled: true } ";
  expect_error(sm + "score_function: SIGMOID",
               "score_function = SIGMOID cannot be used with sparsemixer");
  expect_error(sm + "renormalize: false", "renormalize = false cannot be used with sparsemixer");
  expect_error(sm + "routed_scaling: 2", "routed_scaling = 2 cannot be used with sparsemixer");
  expect_error(sm + "seq_balance_loss_coef: 0.1", "seq_balance_loss_coef = 0.1 cannot be used");
}

// Node-limited routing: the expert groups are the nodes, max_ep_ranks of them kept, each scored
// by its ceil(K / M) best scores; the groups must align with the EP ranks.
TEST(MoeConfigTest, NodeLimitedRouting) {
  const std::string groups = "top_k: 2 expert_groups: 4 ";  // 4 experts, one per group
  StatusOr<MoeLayerConfig> c = parse(groups + "max_ep_ranks: 2");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->kept_groups(), 2);
  EXPECT_EQ(c->group_top(), 1);  // ceil(2 / 2)
  c->top_k = 3;
  EXPECT_EQ(c->group_top(), 2);
  c->max_ep_ranks = 0;
  EXPECT_EQ(c->group_top(), 2);  // group-limited: the two best
  EXPECT_EQ(c->kept_groups(), 4);
  StatusOr<MoeLayerConfig> back =
      parse_moe_config_text(moe_config_to_text(*parse(groups + "max_ep_ranks: 2")));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->max_ep_ranks, 2);
  EXPECT_TRUE(parse(groups + "max_ep_ranks: 2", 2).ok());                   // two groups per rank
  EXPECT_TRUE(parse("top_k: 2 expert_groups: 2 max_ep_ranks: 1", 4).ok());  // on two ranks each
  expect_error(groups + "max_ep_ranks: -1", "max_ep_ranks = -1");
  expect_error("top_k: 2 max_ep_ranks: 1", "needs expert_groups >= 2");
  expect_error(groups + "max_ep_ranks: 5", "needs expert_groups >= 2");
  expect_error(groups + "topk_groups: 2 max_ep_ranks: 2", "topk_groups unset");
  expect_error("top_k: 3 expert_groups: 4 max_ep_ranks: 1", "top_k = 3 exceeds the 1 kept groups");
  StatusOr<MoeLayerConfig> apart = parse_moe_config_text(
      "d_model: 8 d_expert: 16 num_experts: 12 top_k: 2 expert_groups: 6 max_ep_ranks: 2", "moe",
      4);
  ASSERT_FALSE(apart.ok());
  EXPECT_NE(apart.status().message().find(
                "expert_groups = 6 does not align with the 4 expert-parallel ranks"),
            std::string::npos)
      << apart.status().message();
}

TEST(MoeConfigTest, TextFormatErrorsNamePosition) {
  StatusOr<MoeLayerConfig> c = parse_moe_config_text("d_model: 8\nnot_a_field: 3", "cfg.pbtxt");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("cfg.pbtxt: line 2"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find("not_a_field"), std::string::npos);
  c = parse_moe_config_text("d_model: \"eight\"", "cfg.pbtxt");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("line 1"), std::string::npos);
  c = parse_moe_config_text("residual: SIDEWAYS", "cfg.pbtxt");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("SIDEWAYS"), std::string::npos);
}

}  // namespace
}  // namespace moe
