// Dense-layer kernels against independent computations: attention against explicit loops,
// layer norm, cross-entropy known values, AdamW and SGD against hand-computed steps, embedding
// errors. (Their backwards are checked by finite differences through the whole model in
// tests/core/transformer_test.cc; the attention backward also here.)
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/optimizer.h"
#include "tests/testing/gradient_check.h"

namespace moe::kernels {
namespace {

using moe::testing::check_gradients;
using moe::testing::fill_uniform;

TEST(AttentionTest, ForwardMatchesExplicitLoopsAndBackwardMatchesDifferences) {
  const int64_t B = 2, S = 5, H = 2, Dh = 3, D = H * Dh;
  Tensor qkv = Tensor::empty({B * S, 3 * D}, DType::kF64);
  fill_uniform(qkv, 1, -1, 1);
  Tensor out = Tensor::empty({B * S, D}, DType::kF64);
  Tensor probs = Tensor::empty({B, H, S, S}, DType::kF64);
  AttentionArgs args{B, S, H, 0.f, {}, 0};
  ASSERT_TRUE(attention_forward(args, qkv, out, probs).ok());
  const double* x = qkv.data<double>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> w(i + 1);
        double z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < Dh; ++c)
            dot += x[(b * S + i) * 3 * D + h * Dh + c] * x[(b * S + j) * 3 * D + D + h * Dh + c];
          w[j] = std::exp(dot / std::sqrt(3.0));
          z += w[j];
        }
        for (int64_t c = 0; c < Dh; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += w[j] / z * x[(b * S + j) * 3 * D + 2 * D + h * Dh + c];
          EXPECT_NEAR(out.data<double>()[(b * S + i) * D + h * Dh + c], o, 1e-13);
        }
        EXPECT_NEAR(probs.data<double>()[((b * H + h) * S + i) * S + S - 1], i == S - 1 ? w[S - 1] / z : 0.0, 1e-15);
      }
    }
  }
  // Backward, with dropout on the probabilities (a fixed mask).
  args.dropout = 0.3f;
  args.rng = CounterRng{4, make_stream(RngTag::kTest, 2, 0)};
  Tensor w = Tensor::empty({B * S, D}, DType::kF64);
  fill_uniform(w, 2);
  auto loss = [&]() {
    EXPECT_TRUE(attention_forward(args, qkv, out, probs).ok());
    return moe::testing::dot(out, w);
  };
  loss();
  Tensor d_qkv = Tensor::empty(qkv.shape(), DType::kF64);
  ASSERT_TRUE(attention_backward(args, w, qkv, probs, d_qkv).ok());
  for (const auto& f : check_gradients(loss, {{"qkv", qkv, d_qkv}})) ADD_FAILURE() << f;
}

TEST(LayerNormTest, NormalisesRows) {
  Tensor x = Tensor::from_vector<double>({2, 4}, {1, 2, 3, 4, -2, 0, 2, 4});
  Tensor g = Tensor::from_vector<double>({4}, {1, 2, 1, 1});
  Tensor b = Tensor::from_vector<double>({4}, {0, 0, 0, 10});
  Tensor y = Tensor::empty({2, 4}, DType::kF64), mean = Tensor::empty({2}, DType::kF64),
         rstd = Tensor::empty({2}, DType::kF64);
  ASSERT_TRUE(layernorm_forward(x, g, b, 0.0, y, mean, rstd).ok());
  const double s = 1 / std::sqrt(1.25);  // row 0: mean 2.5, var 1.25
  EXPECT_NEAR(y.data<double>()[0], -1.5 * s, 1e-14);
  EXPECT_NEAR(y.data<double>()[1], 2 * -0.5 * s, 1e-14);
  EXPECT_NEAR(y.data<double>()[3], 1.5 * s + 10, 1e-14);
  EXPECT_DOUBLE_EQ(mean.data<double>()[1], 1.0);
  Tensor dx = Tensor::empty({2, 4}, DType::kF64), dg = Tensor::zeros({4}, DType::kF64),
         db = Tensor::zeros({4}, DType::kF64);
  Tensor w = Tensor::empty({2, 4}, DType::kF64);
  fill_uniform(w, 5);
  auto loss = [&]() {
    EXPECT_TRUE(layernorm_forward(x, g, b, 1e-5, y, mean, rstd).ok());
    return moe::testing::dot(y, w);
  };
  loss();
  ASSERT_TRUE(layernorm_backward(w, x, g, mean, rstd, dx, dg, db).ok());
  for (const auto& f : check_gradients(loss, {{"x", x, dx}, {"gamma", g, dg}, {"beta", b, db}})) ADD_FAILURE() << f;
}

TEST(CrossEntropyTest, KnownValuesAndIgnoredTargets) {
  const int64_t v = 7;
  Tensor logits = Tensor::zeros({3, v}, DType::kF64);
  Tensor targets = Tensor::from_vector<int32_t>({3}, {2, -1, 6});
  StatusOr<CrossEntropyResult> r = cross_entropy_forward(logits, targets);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->count, 2);
  EXPECT_NEAR(r->loss_sum, 2 * std::log(7.0), 1e-14);  // uniform logits: log V each
  logits.data<double>()[2] = 100.0;
  r = cross_entropy_forward(logits, targets);
  EXPECT_NEAR(r->loss_sum, std::log(7.0), 1e-12);  // row 0 is now certain
  Tensor d = Tensor::empty({3, v}, DType::kF64);
  Tensor lse = Tensor::empty({3}, DType::kF64);
  ASSERT_TRUE(cross_entropy_forward(logits, targets, lse).ok());
  EXPECT_NEAR(lse.data<double>()[2], std::log(7.0), 1e-14);
  ASSERT_TRUE(cross_entropy_backward(logits, targets, lse, 0.5, d).ok());
  for (int64_t j = 0; j < v; ++j) EXPECT_EQ(d.data<double>()[v + j], 0.0);  // ignored row
  EXPECT_NEAR(d.data<double>()[2 * v + 6], 0.5 * (1.0 / 7 - 1), 1e-15);
  Tensor bad = Tensor::from_vector<int32_t>({3}, {2, 7, 0});
  EXPECT_EQ(cross_entropy_forward(logits, bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(OptimizerTest, AdamWTwoStepsByHand) {
  Tensor p = Tensor::from_vector<double>({2}, {1.0, -2.0});
  Tensor m = Tensor::zeros({2}, DType::kF64), v = Tensor::zeros({2}, DType::kF64);
  Tensor g1 = Tensor::from_vector<double>({2}, {0.5, -1.0});
  Tensor g2 = Tensor::from_vector<double>({2}, {0.1, 2.0});
  AdamWArgs a{0.1, 0.9, 0.99, 1e-8, 0.01, 1};
  ASSERT_TRUE(adamw_step(a, p, g1, m, v).ok());
  // Step 1: m = 0.1 g, v = 0.01 g^2, mhat = g, vhat = g^2 -> p = p (1 - 0.001) - 0.1 sign(g).
  EXPECT_NEAR(p.data<double>()[0], 1.0 * 0.999 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-14);
  EXPECT_NEAR(p.data<double>()[1], -2.0 * 0.999 + 0.1 * 1.0 / (1.0 + 1e-8), 1e-14);
  const double p0 = p.data<double>()[0];
  a.step = 2;
  ASSERT_TRUE(adamw_step(a, p, g2, m, v).ok());
  const double m0 = 0.9 * 0.05 + 0.1 * 0.1, v0 = 0.99 * 0.0025 + 0.01 * 0.01;
  const double want = p0 * 0.999 - 0.1 * (m0 / (1 - 0.81)) / (std::sqrt(v0 / (1 - 0.9801)) + 1e-8);
  EXPECT_NEAR(p.data<double>()[0], want, 1e-14);
}

TEST(OptimizerTest, SgdWithMomentumAndNorms) {
  Tensor p = Tensor::from_vector<double>({1}, {1.0});
  Tensor buf = Tensor::zeros({1}, DType::kF64);
  Tensor g = Tensor::from_vector<double>({1}, {2.0});
  SgdArgs a{0.1, 0.5, 0.0, true};
  ASSERT_TRUE(sgd_step(a, p, g, buf).ok());
  EXPECT_DOUBLE_EQ(p.data<double>()[0], 1.0 - 0.1 * 2.0);
  a.first_step = false;
  ASSERT_TRUE(sgd_step(a, p, g, buf).ok());
  EXPECT_DOUBLE_EQ(buf.data<double>()[0], 0.5 * 2.0 + 2.0);
  EXPECT_DOUBLE_EQ(p.data<double>()[0], 0.8 - 0.1 * 3.0);
  StatusOr<double> sq = sum_of_squares({g, buf});
  ASSERT_TRUE(sq.ok());
  EXPECT_DOUBLE_EQ(*sq, 4.0 + 9.0);
  Tensor nan = Tensor::from_vector<double>({2}, {1.0, std::nan("")});
  EXPECT_FALSE(*all_finite(nan));
  EXPECT_TRUE(*all_finite(g));
}

TEST(EmbeddingTest, LookupAndOutOfRange) {
  Tensor table = Tensor::from_vector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor ids = Tensor::from_vector<int32_t>({3}, {2, 0, 2});
  Tensor out = Tensor::empty({3, 2}, DType::kF32);
  ASSERT_TRUE(embedding_forward(ids, table, out).ok());
  EXPECT_EQ(to_vector<float>(out), (std::vector<float>{5, 6, 1, 2, 5, 6}));
  Tensor dt = Tensor::zeros({3, 2}, DType::kF32);
  ASSERT_TRUE(embedding_backward(ids, out, dt).ok());
  EXPECT_EQ(to_vector<float>(dt), (std::vector<float>{1, 2, 0, 0, 10, 12}));
  Tensor bad = Tensor::from_vector<int32_t>({3}, {2, 3, 0});
  Status s = embedding_forward(bad, table, out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("id 3 at position 1"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace moe::kernels
