// Run configuration files: defaults, arch strings and explicit blocks, MoE defaults and per-block
// overrides, --set overrides, the learning-rate schedule, and errors that name the problem.
#include "proto/run_convert.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moe {
namespace {

const char* kConfig = R"(
model {
  d_model: 32 n_heads: 4 seq_len: 16 arch: "sgsmsfsm"
  moe { num_experts: 4 top_k: 2 heavy_ball { mu: 0.6 } }
}
train { steps: 10 batch_size: 4 optimizer { lr: 0.01 } schedule { warmup_steps: 2 } }
)";

TEST(RunConfigTest, ArchStringAndMoeDefaults) {
  StatusOr<RunConfig> c = parse_run_config(kConfig, "test.pbtxt");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const ModelConfig& m = c->model;
  ASSERT_EQ(m.blocks.size(), 4u);
  EXPECT_TRUE(m.blocks[0].moe);
  EXPECT_EQ(m.blocks[0].moe_cfg.residual, ResidualKind::kPlain);
  EXPECT_EQ(m.blocks[1].moe_cfg.residual, ResidualKind::kHeavyBall);
  EXPECT_DOUBLE_EQ(m.blocks[1].moe_cfg.heavy_ball.mu, 0.6);
  EXPECT_FALSE(m.blocks[2].moe);
  EXPECT_EQ(m.blocks[1].moe_cfg.d_model, 32);
  EXPECT_EQ(m.blocks[1].moe_cfg.d_expert, 32);          // defaults to d_model
  EXPECT_DOUBLE_EQ(m.blocks[1].moe_cfg.expert_dropout, 0.1);  // the model's dropout
  EXPECT_EQ(m.d_ff, 64);
  EXPECT_EQ(m.num_moe_layers(), 3);
  EXPECT_EQ(c->parallel.ep, 1);
  EXPECT_NE(c->data.train.find("data/brown/train.txt.gz"), std::string::npos);
  // The resolved text parses again to the same configuration.
  StatusOr<RunConfig> again = parse_run_config(c->text, "resolved");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->text, c->text);
}

TEST(RunConfigTest, OverridesAndEpFlag) {
  StatusOr<RunConfig> c = parse_run_config(
      kConfig, "test.pbtxt",
      {"train.steps=99", "model.moe.heavy_ball.mu=0.3", "data.train=other.txt",
       "model.arch=sgsg", "train.optimizer.kind=SGD"},
      /*ep_size=*/2);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->train.steps, 99);
  EXPECT_EQ(c->data.train, "other.txt");
  EXPECT_EQ(c->model.blocks.size(), 2u);
  EXPECT_EQ(c->parallel.ep, 2);
  EXPECT_EQ(c->train.optimizer.kind, OptimizerKind::kSgd);

  auto error = [](const std::vector<std::string>& set, int ep = 0) {
    StatusOr<RunConfig> r = parse_run_config(kConfig, "test.pbtxt", set, ep);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(error({"train.stepz=1"}).find("has no field 'stepz'"), std::string::npos);
  EXPECT_NE(error({"train.steps=many"}).find("not a valid value"), std::string::npos);
  EXPECT_NE(error({"train.steps"}).find("expected field.path=value"), std::string::npos);
  EXPECT_NE(error({"model.moe=1"}).find("is a message"), std::string::npos);
  EXPECT_NE(error({}, 3).find("not divisible by the expert-parallel size 3"), std::string::npos);
}

TEST(RunConfigTest, PlanErrors) {
  auto error = [](const std::string& text) {
    StatusOr<RunConfig> r = parse_run_config(text, "bad.pbtxt");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  const std::string moe = " moe { num_experts: 4 } ";
  EXPECT_NE(error("model { arch: \"scsg\"" + moe + "}").find("first MoE layer must use the standard router"),
            std::string::npos);
  EXPECT_NE(error("model { arch: \"sgsa\"" + moe + "}").find("only used in the first MoE layer"),
            std::string::npos);
  EXPECT_NE(error("model { arch: \"sgx\"" + moe + "}").find("must be pairs"), std::string::npos);
  EXPECT_NE(error("model { arch: \"sgsq\"" + moe + "}").find("expected one of g, m, a, r, c, f"),
            std::string::npos);
  EXPECT_NE(error("model { d_model: 30 n_heads: 4 arch: \"sf\" }").find("not divisible by n_heads"),
            std::string::npos);
  EXPECT_NE(error("model {" + moe + "}").find("no blocks"), std::string::npos);
  EXPECT_NE(error("model { arch: \"sg\" moe { num_experts: 4 top_k: 9 } }").find("model.blocks[0].moe.top_k = 9"),
            std::string::npos);
  EXPECT_NE(error("model { arch: \"sf\" } train { batch_size: 0 }").find("train.batch_size = 0"),
            std::string::npos);
  EXPECT_NE(error("model { arch: \"sf\" } train { schedule { min_lr_ratio: 2 } }").find("min_lr_ratio"),
            std::string::npos);
  // Explicit blocks with a per-block override.
  StatusOr<RunConfig> c = parse_run_config(
      "model { blocks { kind: MOE } blocks { kind: MOE moe { residual: ROBUST } } blocks { kind: DENSE }"
      + moe + "}", "blocks.pbtxt");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->model.blocks[1].moe_cfg.residual, ResidualKind::kRobust);
  EXPECT_FALSE(c->model.blocks[2].moe);
  EXPECT_EQ(load_run_config("/nonexistent/x.pbtxt").status().code(), StatusCode::kNotFound);
}

TEST(RunConfigTest, LearningRateSchedule) {
  TrainConfig t;
  t.optimizer.lr = 1.0;
  t.warmup_steps = 4;
  t.steps = 14;
  EXPECT_DOUBLE_EQ(t.learning_rate(0), 0.25);
  EXPECT_DOUBLE_EQ(t.learning_rate(3), 1.0);
  EXPECT_DOUBLE_EQ(t.learning_rate(10), 1.0);
  t.schedule = LrScheduleKind::kCosine;
  t.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(t.learning_rate(4), 1.0);
  EXPECT_NEAR(t.learning_rate(13), 0.1, 1e-12);
  EXPECT_NEAR(t.learning_rate(8), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 4.0 / 9.0)), 1e-12);
}

}  // namespace
}  // namespace moe
