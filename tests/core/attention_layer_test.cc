// MultiHeadAttention layer (core/layers/attention.h): parameter registration, forward against
// explicit loops (projections, causal softmax, the documented dropout key, RoPE) for awkward
// shapes, gradients of x and of every parameter against central finite differences in f64 with
// and without dropout, RoPE, biases and the q/k norm, masks independent of batching, evaluation
// mode, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "core/layers/attention.h"
#include "tests/core/dense_layer_test_util.h"
#include "tests/testing/cross_path.h"

namespace moe::testing {
namespace {

struct Case {
  int64_t batch, seq, max_seq, heads, head_dim;
};
std::string name(const Case& c) {
  return str_cat("B", c.batch, "_S", c.seq, "_Smax", c.max_seq, "_H", c.heads, "_Dh", c.head_dim);
}
void PrintTo(const Case& c, std::ostream* os) { *os << name(c); }

// A parameter of the layer "attn" as doubles; empty when it is not registered.
std::vector<double> get(const ParameterSet& params, const char* leaf) {
  const Parameter* p = params.find(str_cat("attn.", leaf));
  return p != nullptr ? to_vector<double>(p->value) : std::vector<double>();
}

// With qk_norm (weights q_norm.gamma, k_norm.gamma registered), each head's q and k [Dh] of qkv
// [N, 3D] times gamma / sqrt(mean square + eps), by explicit loops.
void naive_qk_norm(const ParameterSet& params, const Case& c, double eps,
                   std::vector<double>* qkv) {
  const std::vector<double> gq = get(params, "q_norm.gamma"), gk = get(params, "k_norm.gamma");
  if (gq.empty()) return;
  const int64_t Dh = c.head_dim, D = c.heads * Dh, N = c.batch * c.seq;
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t head = 0; head < 2 * c.heads; ++head) {  // the heads of q, then of k
      double* v = &(*qkv)[r * 3 * D + head * Dh];
      double ss = 0;
      for (int64_t k = 0; k < Dh; ++k) ss += v[k] * v[k];
      const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(Dh) + eps);
      for (int64_t k = 0; k < Dh; ++k) v[k] *= rstd * (head < c.heads ? gq : gk)[k];
    }
  }
}

// qkv [B*S, 3D] = x W_qkv (+ b_qkv), with qk_norm normalised per head (naive_qk_norm), then with
// RoPE each head's q and k pair (k, k + Dh/2) turned by s / base^(2k/Dh) at position s, by
// explicit loops.
std::vector<double> naive_qkv(const ParameterSet& params, const std::vector<double>& x,
                              const Case& c, double rope_base, double eps = 1e-5) {
  const int64_t S = c.seq, Dh = c.head_dim, D = c.heads * Dh, N = c.batch * S, half = Dh / 2;
  std::vector<double> qkv =
      naive_matmul(x, get(params, "w_qkv"), N, D, 3 * D, false, get(params, "b_qkv"));
  naive_qk_norm(params, c, eps, &qkv);
  if (rope_base == 0) return qkv;
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t head = 0; head < 2 * c.heads; ++head) {  // the heads of q, then of k
      double* v = &qkv[r * 3 * D + head * Dh];
      for (int64_t k = 0; k < half; ++k) {
        const double theta = static_cast<double>(r % S) / std::pow(rope_base, 2.0 * k / Dh);
        const double a = v[k], b = v[k + half];
        v[k] = a * std::cos(theta) - b * std::sin(theta);
        v[k + half] = b * std::cos(theta) + a * std::sin(theta);
      }
    }
  }
  return qkv;
}

// y [B*S, D] by explicit loops. p: the dropout probability in effect (0 = none).
std::vector<double> naive_mha(const ParameterSet& params, const std::vector<double>& x,
                              const Case& c, float p, CounterRng rng, int64_t seq_offset,
                              double rope_base = 0, double eps = 1e-5) {
  const int64_t S = c.seq, H = c.heads, Dh = c.head_dim, D = H * Dh, N = c.batch * S;
  const std::vector<double> qkv = naive_qkv(params, x, c, rope_base, eps);
  std::vector<double> ctx(N * D, 0.0);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> e(i + 1);
        double z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double score = 0;
          for (int64_t k = 0; k < Dh; ++k) {
            score +=
                qkv[(b * S + i) * 3 * D + h * Dh + k] * qkv[(b * S + j) * 3 * D + D + h * Dh + k];
          }
          e[j] = std::exp(score / std::sqrt(static_cast<double>(Dh)));
          z += e[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          double keep = 1.0;
          if (p > 0) {
            const uint64_t key =
                static_cast<uint64_t>((((seq_offset + b) * H + h) * S + i) * S + j);
            keep = rng.uniform(key) >= p ? 1.0 / (1.0 - p) : 0.0;
          }
          for (int64_t k = 0; k < Dh; ++k) {
            ctx[(b * S + i) * D + h * Dh + k] +=
                e[j] / z * keep * qkv[(b * S + j) * 3 * D + 2 * D + h * Dh + k];
          }
        }
      }
    }
  }
  return naive_matmul(ctx, get(params, "w_o"), N, D, D, false, get(params, "b_o"));
}

TEST(AttentionLayerTest, RegistersNamedParameters) {
  ParameterSet params(&host_context(), DType::kF32);
  MultiHeadAttention attn("blocks.1.attn", 6, 2, 8, 0.1, &params);
  const std::vector<std::pair<std::string, Shape>> want = {{"blocks.1.attn.w_qkv", {6, 18}},
                                                           {"blocks.1.attn.b_qkv", {18}},
                                                           {"blocks.1.attn.w_o", {6, 6}},
                                                           {"blocks.1.attn.b_o", {6}}};
  for (const auto& [name, shape] : want) {
    const Parameter* p = params.find(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ(p->shape, shape) << name;
    EXPECT_EQ(p->weight_decay, name.find(".w_") != std::string::npos) << name;
    EXPECT_EQ(p->matmul, name.find(".w_") != std::string::npos) << name;  // bf16 under BF16
  }
}

class AttentionLayerShapes : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionLayerShapes, ForwardMatchesLoopsAndGradientsMatchDifferences) {
  const Case c = GetParam();
  const int64_t D = c.heads * c.head_dim, N = c.batch * c.seq;
  const CounterRng rng{5, make_stream(RngTag::kTest, 9, 1)};
  for (const bool training : {false, true}) {
    SCOPED_TRACE(training ? "training (dropout 0.3)" : "evaluation");
    ParameterSet params(&host_context(), DType::kF64);
    MultiHeadAttention attn("attn", D, c.heads, c.max_seq, 0.3, &params);
    randomize_parameters(&params, 50);
    Tensor x = Tensor::empty({N, D}, DType::kF64);
    fill_uniform(x, 51, -1, 1);
    MultiHeadAttention::Saved saved;
    StatusOr<Tensor> out = attn.forward(x, c.batch, 7, training, rng, &saved);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    Tensor y = *out;
    const std::vector<double> want =
        naive_mha(params, to_vector<double>(x), c, training ? 0.3f : 0.f, rng, 7);
    for (int64_t i = 0; i < N * D; ++i) EXPECT_NEAR(y.data<double>()[i], want[i], 1e-13) << i;

    Tensor w = Tensor::empty(y.shape(), DType::kF64);
    fill_uniform(w, 52);
    auto loss = [&]() {
      MultiHeadAttention::Saved s;
      return dot(attn.forward(x, c.batch, 7, training, rng, &s).value(), w);
    };
    StatusOr<Tensor> dx = attn.backward(w, saved);
    ASSERT_TRUE(dx.ok());
    std::vector<GradTarget> targets = parameter_targets(params);
    targets.push_back({"x", x, *dx});
    for (const auto& f : check_gradients(loss, targets, kFiniteDiff)) ADD_FAILURE() << f;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionLayerShapes,
                         ::testing::Values(Case{1, 1, 1, 1, 3}, Case{2, 3, 5, 2, 3},
                                           Case{1, 5, 5, 3, 2}, Case{3, 2, 4, 1, 5}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return name(info.param);
                         });

TEST(AttentionLayerTest, WithoutBiasesRegistersTheMatricesOnly) {
  ParameterSet params(&host_context(), DType::kF32);
  AttentionOptions options;
  options.bias = false;
  MultiHeadAttention attn("blocks.1.attn", 6, 2, 8, 0.1, &params, options);
  ASSERT_EQ(params.all().size(), 2u);
  EXPECT_EQ(params.all()[0]->name, "blocks.1.attn.w_qkv");
  EXPECT_EQ(params.all()[1]->name, "blocks.1.attn.w_o");
  EXPECT_EQ(params.find("blocks.1.attn.b_qkv"), nullptr);
  EXPECT_EQ(params.find("blocks.1.attn.b_o"), nullptr);
}

// RoPE, bias-free attention and Qwen3's q/k norm: the forward against the loops (the saved qkv
// is the normalised and rotated one), and every gradient (the norms' weights among them) against
// finite differences, with and without dropout.
struct OptionsCase {
  Case shape;
  double rope_base;  // 0: none
  bool bias;
  bool qk_norm = false;
};
std::string name(const OptionsCase& c) {
  return str_cat(name(c.shape), c.rope_base > 0 ? "_rope" : "", c.bias ? "" : "_no_bias",
                 c.qk_norm ? "_qk_norm" : "");
}
void PrintTo(const OptionsCase& c, std::ostream* os) { *os << name(c); }

class AttentionLayerOptions : public ::testing::TestWithParam<OptionsCase> {};

TEST_P(AttentionLayerOptions, ForwardMatchesLoopsAndGradientsMatchDifferences) {
  const Case c = GetParam().shape;
  const AttentionOptions options{GetParam().rope_base, GetParam().bias, GetParam().qk_norm, 0.01};
  const int64_t D = c.heads * c.head_dim, N = c.batch * c.seq;
  const CounterRng rng{6, make_stream(RngTag::kTest, 9, 2)};
  for (const bool training : {false, true}) {
    SCOPED_TRACE(training ? "training (dropout 0.3)" : "evaluation");
    ParameterSet params(&host_context(), DType::kF64);
    MultiHeadAttention attn("attn", D, c.heads, c.max_seq, 0.3, &params, options);
    EXPECT_EQ(params.all().size(), (options.bias ? 4u : 2u) + (options.qk_norm ? 2u : 0u));
    randomize_parameters(&params, 70);
    Tensor x = Tensor::empty({N, D}, DType::kF64);
    fill_uniform(x, 71, -1, 1);
    MultiHeadAttention::Saved saved;
    StatusOr<Tensor> out = attn.forward(x, c.batch, 3, training, rng, &saved);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    const std::vector<double> qkv =
        naive_qkv(params, to_vector<double>(x), c, options.rope_base, options.norm_eps);
    for (int64_t i = 0; i < N * 3 * D; ++i) EXPECT_NEAR(saved.qkv.data<double>()[i], qkv[i], 1e-14);
    const std::vector<double> want =
        naive_mha(params, to_vector<double>(x), c, training ? 0.3f : 0.f, rng, 3, options.rope_base,
                  options.norm_eps);
    for (int64_t i = 0; i < N * D; ++i) EXPECT_NEAR(out->data<double>()[i], want[i], 1e-13) << i;

    Tensor w = Tensor::empty(out->shape(), DType::kF64);
    fill_uniform(w, 72);
    auto loss = [&]() {
      MultiHeadAttention::Saved s;
      return dot(attn.forward(x, c.batch, 3, training, rng, &s).value(), w);
    };
    StatusOr<Tensor> dx = attn.backward(w, saved);
    ASSERT_TRUE(dx.ok());
    std::vector<GradTarget> targets = parameter_targets(params);
    targets.push_back({"x", x, *dx});
    for (const auto& f : check_gradients(loss, targets, kFiniteDiff)) ADD_FAILURE() << f;
  }
}

INSTANTIATE_TEST_SUITE_P(Options, AttentionLayerOptions,
                         ::testing::Values(OptionsCase{{1, 1, 1, 1, 2}, 10000.0, true},
                                           OptionsCase{{2, 3, 5, 2, 4}, 10000.0, true},
                                           OptionsCase{{1, 5, 5, 3, 2}, 10.0, false},
                                           OptionsCase{{3, 4, 4, 1, 6}, 100.0, true},
                                           OptionsCase{{2, 3, 5, 2, 3}, 0.0, false},
                                           OptionsCase{{2, 3, 5, 2, 4}, 10000.0, false, true},
                                           OptionsCase{{1, 4, 4, 3, 3}, 0.0, true, true}),
                         [](const ::testing::TestParamInfo<OptionsCase>& info) {
                           return name(info.param);
                         });

// The attention dropout mask is keyed by the global sequence index, so each sequence run alone
// (at its global index) gives the batch's output. Cross-path equality (tests/testing/
// cross_path.h): the Q/K/V and output projections run over 4 rows alone and 12 in the batch, and
// no BLAS promises a row the same bits in products of different shapes, so the outputs agree
// within float32 epsilon x the sublayer's depth x their magnitude (the mask, its one decision, is
// keyed exactly); a wrong mask moves the outputs by O(1), as the last check shows.
TEST(AttentionLayerTest, DropoutDoesNotDependOnBatching) {
  const int64_t B = 3, S = 4, H = 2, D = 6;
  ParameterSet params(&host_context(), DType::kF32);
  MultiHeadAttention attn("attn", D, H, S, 0.5, &params);
  randomize_parameters(&params, 60);
  Tensor x = Tensor::empty({B * S, D}, DType::kF32);
  fill_uniform(x, 61);
  const CounterRng rng{8, make_stream(RngTag::kTest, 10, 3)};
  MultiHeadAttention::Saved saved;
  Tensor y = attn.forward(x, B, 20, true, rng, &saved).value();
  for (int64_t b = 0; b < B; ++b) {
    MultiHeadAttention::Saved s;
    StatusOr<Tensor> one = attn.forward(x.rows(b * S, (b + 1) * S), 1, 20 + b, true, rng, &s);
    ASSERT_TRUE(one.ok());
    const TensorView batch_rows = y.view().rows(b * S, (b + 1) * S);
    double magnitude = 0;
    for (int64_t i = 0; i < batch_rows.numel(); ++i) {
      magnitude = std::max(magnitude, std::fabs(static_cast<double>(batch_rows.data<float>()[i])));
    }
    EXPECT_TRUE(values_within(str_cat("sequence ", b), *one, batch_rows,
                              rounding_tolerance(kF32Eps, ForwardStages::kAttention, magnitude)));
    // At another sequence index the mask, and so the output, differs.
    StatusOr<Tensor> moved = attn.forward(x.rows(b * S, (b + 1) * S), 1, 21 + b, true, rng, &s);
    ASSERT_TRUE(moved.ok());
    EXPECT_GT(max_abs_diff(*moved, y.view().rows(b * S, (b + 1) * S)), 1e-3) << b;
  }
}

TEST(AttentionLayerTest, BadArgumentsNameTheLayer) {
  ParameterSet params(&host_context(), DType::kF32);
  MultiHeadAttention attn("blocks.2.attn", 4, 2, 3, 0.0, &params);
  ASSERT_TRUE(params.allocate().ok());
  MultiHeadAttention::Saved saved;
  Tensor x = Tensor::zeros({6, 4}, DType::kF32);
  ASSERT_TRUE(attn.forward(x, 2, 0, true, {}, &saved).ok());
  expect_invalid(attn.forward(x, 4, 0, true, {}, &saved).status(),
                 {"blocks.2.attn", "x"});  // 6 % 4
  expect_invalid(attn.forward(x, 1, 0, true, {}, &saved).status(), {"blocks.2.attn", "S <= 3"});
  expect_invalid(attn.forward(x, 0, 0, true, {}, &saved).status(), {"blocks.2.attn", "B = 0"});
  expect_invalid(attn.forward(Tensor::zeros({6, 5}, DType::kF32), 2, 0, true, {}, &saved).status(),
                 {"blocks.2.attn", "x"});
  expect_invalid(attn.forward(Tensor::zeros({6, 4}, DType::kF64), 2, 0, true, {}, &saved).status(),
                 {"blocks.2.attn", "x"});
  expect_invalid(attn.backward(Tensor::zeros({5, 4}, DType::kF32), saved).status(),
                 {"blocks.2.attn", "dy"});
  // H must divide D: reported by the attention kernel, with the layer's name.
  ParameterSet params3(&host_context(), DType::kF32);
  MultiHeadAttention bad_heads("attn3", 4, 3, 3, 0.0, &params3);
  ASSERT_TRUE(params3.allocate().ok());
  expect_invalid(bad_heads.forward(x, 2, 0, false, {}, &saved).status(),
                 {"attn3", "divisible by H = 3"});
  // RoPE needs an even head width: reported by the RoPE kernel, with the layer's name.
  ParameterSet params4(&host_context(), DType::kF32);
  MultiHeadAttention odd_rope("attn4", 4, 4, 3, 0.0, &params4, {10000.0, true});
  ASSERT_TRUE(params4.allocate().ok());
  expect_invalid(odd_rope.forward(x, 2, 0, false, {}, &saved).status(), {"attn4", "odd"});
}

}  // namespace
}  // namespace moe::testing
