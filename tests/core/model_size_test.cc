// The model's size and training FLOPs (core/train/model_size.h): a tiny config counted by hand
// (also with SwiGLU FFNs and RMSNorm), and every config family (both block styles, tied and untied
// embeddings, learned positions and RoPE, with and without linear biases, SwiGLU, RMSNorm) against
// the parameter tensors a built model really registers: the total is the sum of every parameter's
// elements, the experts' share the sum of the expert parameters', and the active count the total
// less (E - K) / E of each MoE layer's expert parameters. Also the measured GEMM rate's contract
// (core/train/gemm_rate.h), on the host.
#include "core/train/model_size.h"

#include <gtest/gtest.h>

#include "core/model/transformer.h"
#include "core/train/gemm_rate.h"
#include "proto/run_convert.h"
#include "tests/core/trainer_test_util.h"
#include "tests/testing/gradient_check.h"

namespace moe::testing {
namespace {

// D 8, S 4, V 10, two blocks: MoE (E 4, K 1, d_expert 8) then dense (d_ff 16); post-LN, untied.
TEST(ModelSizeTest, ATinyModelCountedByHand) {
  StatusOr<RunConfig> cfg = parse_run_config(
      "model { vocab_size: 10 d_model: 8 n_heads: 2 seq_len: 4 d_ff: 16 arch: \"sgsf\" "
      "moe { num_experts: 4 top_k: 1 d_expert: 8 } }",
      "tiny");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  const ModelSize z = model_size(cfg->model);
  // Embeddings: tokens 10 x 8 = 80, positions 4 x 8 = 32, the head's own 10 x 8 = 80.
  // Each block: attention 4 x 8 x 8 + 4 x 8 = 288, ln1 and ln2 2 x 16 = 32: 320, twice.
  // MoE block: ln_in 16, router 8 x 4 + 4 = 36, experts 4 x (2 x 8 x 8 + 8 + 8) = 4 x 144 = 576.
  // Dense block: 2 x 8 x 16 + 16 + 8 = 280. Post-LN: no final LayerNorm.
  EXPECT_EQ(z.total_params, 192 + 640 + 16 + 36 + 576 + 280);  // 1740
  EXPECT_EQ(z.expert_params, 576);
  EXPECT_EQ(z.active_params, 1740 - 3 * 144);  // top-1 of 4 experts: 3 are idle per token
  EXPECT_EQ(z.lookup_params, 32 + 80);         // positions; the token table (untied)
  EXPECT_EQ(z.matmul_params(), 1308 - 112);
  // 6 x 1196 + 12 x 2 layers x 8 x 4.
  EXPECT_DOUBLE_EQ(z.train_flops_per_token, 6.0 * 1196 + 12.0 * 2 * 8 * 4);

  // Tied: the table is also the head, so a token multiplies with it; pre-LN adds the final LN.
  cfg->model.tie_embeddings = true;
  cfg->model.block_style = BlockStyle::kPreLn;
  const ModelSize t = model_size(cfg->model);
  EXPECT_EQ(t.total_params, 1740 - 80 - 16 + 16);  // no head weight, no ln_in, a final LN
  EXPECT_EQ(t.lookup_params, 32);
  EXPECT_DOUBLE_EQ(t.train_flops_per_token,
                   6.0 * static_cast<double>(t.active_params - 32) + 12.0 * 2 * 8 * 4);

  // RoPE: no position table, which was all of the lookups; the multiplied ones stay.
  cfg->model.position = PositionKind::kRope;
  const ModelSize r = model_size(cfg->model);
  EXPECT_EQ(r.total_params, t.total_params - 32);
  EXPECT_EQ(r.lookup_params, 0);
  EXPECT_EQ(r.matmul_params(), t.matmul_params());
  EXPECT_DOUBLE_EQ(r.train_flops_per_token, t.train_flops_per_token);

  // RMSNorm: each of the five norms (ln1, ln2 twice, the final norm) has no beta.
  cfg->model.norm = NormKind::kRmsNorm;
  EXPECT_EQ(model_size(cfg->model).total_params, r.total_params - 5 * 8);
}

// SwiGLU: w1 is [D, 2F] (and b1 [2F]), so each FFN multiplies by 3 D F instead of 2 D F.
TEST(ModelSizeTest, SwigluFirstMatricesAreTwiceAsWide) {
  StatusOr<RunConfig> cfg = parse_run_config(
      "model { vocab_size: 10 d_model: 8 n_heads: 2 seq_len: 4 d_ff: 16 arch: \"sgsf\" "
      "activation: SWIGLU moe { num_experts: 4 top_k: 1 d_expert: 8 activation: SWIGLU } }",
      "tiny_swiglu");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  const ModelSize z = model_size(cfg->model);
  // ATinyModelCountedByHand's 1740, with the dense FFN 8 x 32 + 32 + 16 x 8 + 8 = 424 (was 280)
  // and each expert 8 x 16 + 16 + 8 x 8 + 8 = 216 (was 144).
  EXPECT_EQ(z.total_params, 1740 + 144 + 4 * 72);  // 2172
  EXPECT_EQ(z.expert_params, 4 * 216);
  EXPECT_EQ(z.active_params, 2172 - 3 * 216);
  EXPECT_DOUBLE_EQ(z.train_flops_per_token, 6.0 * (1524 - 112) + 12.0 * 2 * 8 * 4);
}

// One FFN's matrices and biases, by hand (D = 8, F = 16).
TEST(ModelSizeTest, FfnParamsByActivationAndBias) {
  const FfnParams plain = ffn_params(8, 16, ExpertActivation::kRelu, true);
  EXPECT_EQ(plain.matrices, 2 * 8 * 16);
  EXPECT_EQ(plain.biases, 16 + 8);
  const FfnParams gated = ffn_params(8, 16, ExpertActivation::kSwiglu, true);
  EXPECT_EQ(gated.matrices, 3 * 8 * 16);
  EXPECT_EQ(gated.biases, 32 + 8);
  EXPECT_EQ(gated.total(), 3 * 8 * 16 + 40);
  EXPECT_EQ(ffn_params(8, 16, ExpertActivation::kSwiglu, false).total(), 3 * 8 * 16);
  EXPECT_EQ(ffn_params(8, 16, ExpertActivation::kGelu, false).total(), 2 * 8 * 16);
}

// The counts of a built model's parameter tensors (ep 1: every expert is on this rank).
struct TensorCounts {
  int64_t total = 0, expert = 0, inactive = 0, lookup = 0;
};
TensorCounts count_tensors(const ModelConfig& m, const TransformerLM& model) {
  TensorCounts c;
  bool own_head = false;
  for (const auto& p : model.params().all()) {
    c.total += p->numel();
    if (p->name == "embed.positions") c.lookup += p->numel();
    if (p->name == "head.weight") own_head = true;
    if (p->kind != ParamKind::kExpert) continue;
    c.expert += p->numel();
    // "blocks.<i>.moe...": the block's E and K.
    const size_t dot = p->name.find('.', 7);
    const MoeLayerConfig& moe = m.blocks[std::stoul(p->name.substr(7, dot - 7))].moe_cfg;
    c.inactive += p->numel() / moe.num_experts * (moe.num_experts - moe.top_k);
  }
  if (own_head) c.lookup += m.vocab_size * m.d_model;  // the token table is then only looked up
  return c;
}

// Loss-free balancing keeps one bias per expert and MoE layer (a dense, untrained parameter).
TEST(ModelSizeTest, LossFreeBiasIsCountedAsTheModelRegistersIt) {
  StatusOr<RunConfig> cfg = parse_run_config(
      "model { vocab_size: 10 d_model: 8 n_heads: 2 seq_len: 4 arch: \"sgsg\" "
      "moe { num_experts: 4 top_k: 2 d_expert: 8 score_function: SIGMOID "
      "bias_update_rate: 0.001 } }",
      "tiny_loss_free");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  auto model = TransformerLM::create(cfg->model, &host_context(), DType::kF32, nullptr);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_NE((*model)->params().find("blocks.1.moe.score_bias"), nullptr);
  const TensorCounts c = count_tensors(cfg->model, **model);
  const ModelSize z = model_size(cfg->model);
  EXPECT_EQ(z.total_params, c.total);
  cfg->model.blocks[0].moe_cfg.bias_update_rate = 0;
  cfg->model.blocks[1].moe_cfg.bias_update_rate = 0;
  EXPECT_EQ(model_size(cfg->model).total_params, z.total_params - 2 * 4);
}

TEST(ModelSizeTest, EveryFamilyAgreesWithTheModelsTensors) {
  struct Variant {
    std::vector<std::string> set;
    std::string what;
  };
  const std::vector<Variant> variants = {
      {{}, ""},
      {{"model.tie_embeddings=true", "model.block_style=PRE_LN"}, " (tied, pre-LN)"},
      {{"model.position=ROPE"}, " (RoPE)"},
      {{"model.linear_bias=false"}, " (no linear biases)"},
      {{"model.activation=SWIGLU", "model.moe.activation=SWIGLU"}, " (SwiGLU)"},
      {{"model.norm=RMS_NORM"}, " (RMSNorm)"},
      {{"model.norm=RMS_NORM", "model.block_style=PRE_LN"}, " (RMSNorm, pre-LN)"},
      {{"model.moe.shared_experts=2", "model.moe.d_shared=24"}, " (shared experts)"},
      {{"model.moe.shared_experts=1", "model.moe.shared_expert_gate=true"}, " (gated shared)"},
      {{"model.qk_norm=true"}, " (q/k norm)"}};
  std::vector<std::string> families = config_families();
  for (const std::string& modern : config_families("modern")) families.push_back(modern);
  ASSERT_GE(families.size(), 12u);
  for (const std::string& family : families) {
    for (const Variant& variant : variants) {
      StatusOr<RunConfig> cfg = small_family_config(family, "/nonexistent", 1, variant.set);
      ASSERT_TRUE(cfg.ok()) << family << ": " << cfg.status().to_string();
      cfg->model.vocab_size = 50;
      const Status valid = cfg->model.validate(1);
      ASSERT_TRUE(valid.ok()) << family << ": " << valid.to_string();
      auto model = TransformerLM::create(cfg->model, &host_context(), DType::kF32, nullptr);
      ASSERT_TRUE(model.ok()) << family << ": " << model.status().to_string();
      const TensorCounts c = count_tensors(cfg->model, **model);
      const ModelSize z = model_size(cfg->model);
      const std::string what = family + variant.what;
      EXPECT_EQ(z.total_params, c.total) << what;
      EXPECT_EQ(z.expert_params, c.expert) << what;
      EXPECT_GT(c.expert, 0) << what << ": no MoE layer tested";
      EXPECT_EQ(z.active_params, c.total - c.inactive) << what;
      EXPECT_EQ(z.lookup_params, c.lookup) << what;
      const double attention = 12.0 * static_cast<double>(cfg->model.blocks.size()) *
                               static_cast<double>(cfg->model.d_model * cfg->model.seq_len);
      EXPECT_DOUBLE_EQ(z.train_flops_per_token,
                       6.0 * static_cast<double>(c.total - c.inactive - c.lookup) + attention)
          << what;
    }
  }
}

TEST(ModelSizeTest, SiCounts) {
  EXPECT_EQ(si_count(42), "42");
  EXPECT_EQ(si_count(812345), "812k");
  EXPECT_EQ(si_count(3561234), "3.56M");
  EXPECT_EQ(si_count(1.234e9, "FLOP/s"), "1.23 GFLOP/s");
  EXPECT_EQ(si_count(5, "FLOP"), "5 FLOP");
}

// The rate is positive on any device (here the host's BLAS); nonsense sizes are refused.
TEST(GemmRateTest, MeasuresAPositiveRateAndRefusesEmptyProducts) {
  StatusOr<double> rate = measure_gemm_rate(host_context(), DType::kF32, 64, 2);
  ASSERT_TRUE(rate.ok()) << rate.status().to_string();
  EXPECT_GT(*rate, 0);
  EXPECT_EQ(measure_gemm_rate(host_context(), DType::kF32, 0, 2).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(measure_gemm_rate(host_context(), DType::kF32, 64, 0).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::testing
