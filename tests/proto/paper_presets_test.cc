// configs/papers/*.pbtxt resolve to the settings each paper states (spec/momentum-smoe.md 6.1-6.2,
// spec/sparsemixer-acmoe.md B.6-B.10), field by field: model sizes and arch strings, dropless
// routing, the balance and z-loss weights, the residual dynamics' coefficients, the AC gate, Adam
// without weight decay, the constant schedule after warmup, no clipping, batch and steps. Every
// file of the folder is checked (a new preset must be added here).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "proto/run_convert.h"

namespace moe {
namespace {

namespace fs = std::filesystem;

struct Paper {
  std::string arch;
  int64_t d, seq, batch, steps, warmup;
  double dropout, lr, balance;
};

// From the spec's tables (momentum-smoe.md 6.2; sparsemixer-acmoe.md B.10 and its LM table).
const std::map<std::string, Paper>& papers() {
  static const std::map<std::string, Paper> p = {
      {"smoe-small", {"sgsgsg", 128, 256, 96, 60000, 3000, 0.7, 7e-4, 0}},
      {"momentum-small", {"smsmsm", 128, 256, 96, 60000, 3000, 0.7, 7e-4, 0}},
      {"smoe-medium", {"sgsgsgsgsgsg", 352, 512, 48, 80000, 4000, 0.1, 7e-4, 0}},
      {"momentum-medium", {"smsmsmsmsmsm", 352, 512, 48, 80000, 4000, 0.1, 7e-4, 0}},
      {"adam-medium", {"sasmsmsmsmsm", 352, 512, 48, 80000, 4000, 0.1, 7e-4, 0}},
      {"robust-medium", {"srsrsrsrsrsr", 352, 512, 48, 80000, 4000, 0.1, 7e-4, 0}},
      {"glam-medium", {"sgsfsgsfsgsfsgsfsgsfsgsf", 352, 512, 48, 120000, 4000, 0.1, 7e-5, 0}},
      {"momentum-glam-medium",
       {"smsfsmsfsmsfsmsfsmsfsmsf", 352, 512, 48, 120000, 4000, 0.1, 7e-5, 0}},
      {"adam-glam-medium", {"sasfsmsfsmsfsmsfsmsfsmsf", 352, 512, 48, 120000, 4000, 0.1, 7e-5, 0}},
      {"acmoe-medium", {"sgsgscscscsc", 352, 512, 48, 80000, 4000, 0.1, 7e-4, 0.01}},
  };
  return p;
}

TEST(PaperPresetsTest, EveryPresetResolvesToItsPapersSettings) {
  std::set<std::string> seen;
  for (const auto& entry : fs::directory_iterator(std::string(MOE_CONFIG_DIR) + "/papers")) {
    const std::string name = entry.path().stem().string();
    SCOPED_TRACE(name);
    ASSERT_EQ(papers().count(name), 1u)
        << "configs/papers/" << name << ".pbtxt has no expected settings in this test";
    seen.insert(name);
    const Paper& want = papers().at(name);
    StatusOr<RunConfig> c = load_run_config(entry.path().string());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    const ModelConfig& m = c->model;
    EXPECT_EQ(m.arch, want.arch);
    EXPECT_EQ(m.d_model, want.d);
    EXPECT_EQ(m.d_ff, want.d);
    EXPECT_EQ(m.n_heads, 8);
    EXPECT_EQ(m.seq_len, want.seq);
    EXPECT_EQ(m.dropout, want.dropout);
    EXPECT_EQ(m.block_style, BlockStyle::kPostLnDoubleResidual);
    int moe_layers = 0;
    for (size_t b = 0; b < m.blocks.size(); ++b) {
      if (!m.blocks[b].moe) continue;
      const MoeLayerConfig& l = m.blocks[b].moe_cfg;
      SCOPED_TRACE("block " + std::to_string(b));
      const char kind = want.arch[2 * b + 1];
      ++moe_layers;
      EXPECT_EQ(l.num_experts, 16);
      EXPECT_EQ(l.top_k, 2);
      EXPECT_EQ(l.d_expert, want.d);
      EXPECT_EQ(l.activation, ExpertActivation::kRelu);
      EXPECT_TRUE(l.dropless) << "no paper has a capacity limit";
      EXPECT_EQ(l.balance_loss_coef, want.balance);
      EXPECT_EQ(l.z_loss_coef, 0);
      EXPECT_EQ(l.ac.enabled, kind == 'c');
      if (kind == 'm' || kind == 'a') {
        EXPECT_EQ(l.effective_mu(), 0.7);
        EXPECT_EQ(l.effective_gamma(), 1.0);
      }
      if (kind == 'a') {
        EXPECT_EQ(l.residual, ResidualKind::kAdam);
        EXPECT_EQ(l.adam.beta1, 0.9);
        EXPECT_EQ(l.adam.beta2, 0.999);
        EXPECT_EQ(l.adam.eps, 1e-8);
        EXPECT_EQ(l.adam.eps_placement, AdamEpsPlacement::kInsideSqrt);
        EXPECT_EQ(l.adam.kappa, 1.0);
        EXPECT_EQ(l.adam.gamma, name == "adam-glam-medium" ? 0.8 : 1.0);
      }
      if (kind == 'c') {
        EXPECT_EQ(l.ac.normalization, AcNormalization::kReferenceCode);
        EXPECT_EQ(l.ac.eps, 1e-4);
        EXPECT_EQ(l.ac.clip_mult, 10.0);
        EXPECT_EQ(l.ac.min_cluster_size, 0);
        EXPECT_EQ(l.ac.logits, AcLogits::kUnitNormEmbeddings);
        EXPECT_FALSE(l.ac.global_stats) << "per-GPU statistics, as the reference code";
      }
      EXPECT_EQ(l.residual, kind == 'g' || kind == 'c' ? ResidualKind::kPlain
                            : kind == 'm'              ? ResidualKind::kHeavyBall
                            : kind == 'a'              ? ResidualKind::kAdam
                                                       : ResidualKind::kRobust);
    }
    EXPECT_EQ(moe_layers, name.find("small") != std::string::npos ? 3 : 6);
    const TrainConfig& t = c->train;
    EXPECT_EQ(t.optimizer.kind, OptimizerKind::kAdamW);
    EXPECT_EQ(t.optimizer.weight_decay, 0) << "Adam, no weight decay";
    EXPECT_EQ(t.optimizer.beta1, 0.9);
    EXPECT_EQ(t.optimizer.beta2, 0.999);
    EXPECT_EQ(t.optimizer.eps, 1e-8);
    EXPECT_EQ(t.optimizer.lr, want.lr);
    EXPECT_EQ(t.schedule, LrScheduleKind::kConstant);
    EXPECT_EQ(t.warmup_steps, want.warmup);
    EXPECT_EQ(t.grad_clip, 0) << "no clipping";
    EXPECT_EQ(t.batch_size, want.batch);
    EXPECT_EQ(t.steps, want.steps);
    // 24,576 tokens per optimiser step in every LM script.
    EXPECT_EQ(t.batch_size * m.seq_len, 24576);
    EXPECT_EQ(c->data.dataset, "data/wikitext-103");
  }
  EXPECT_EQ(seen.size(), papers().size()) << "a preset of this test has no file";
}

}  // namespace
}  // namespace moe
