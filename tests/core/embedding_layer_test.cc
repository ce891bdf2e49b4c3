// Embedding and OutputHead layers (core/layers/embedding.h): forward against explicit loops,
// sequences shorter than S_max, backward against central finite differences in f64 for every
// parameter (untied and tied head, with and without learned positions), accumulation of
// parameter gradients, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/layers/embedding.h"
#include "tests/core/dense_layer_test_util.h"

namespace moe::testing {
namespace {

Tensor make_ids(int64_t b, int64_t s, int64_t vocab) {
  Tensor ids = Tensor::empty({b, s}, DType::kI32);
  for (int64_t i = 0; i < b * s; ++i)
    ids.data<int32_t>()[i] = static_cast<int32_t>((3 * i + 1) % vocab);
  return ids;
}

TEST(EmbeddingLayerTest, RegistersNamedParameters) {
  ParameterSet params(&host_context(), DType::kF32);
  Embedding embed("embed", 11, 4, 6, &params);
  ASSERT_NE(params.find("embed.tokens"), nullptr);
  ASSERT_NE(params.find("embed.positions"), nullptr);
  EXPECT_EQ(params.find("embed.tokens")->shape, (Shape{11, 4}));
  EXPECT_EQ(params.find("embed.positions")->shape, (Shape{6, 4}));
  EXPECT_TRUE(params.find("embed.tokens")->matmul);  // the tied head's operand
  EXPECT_FALSE(params.find("embed.positions")->matmul);
  EXPECT_EQ(&embed.tokens(), params.find("embed.tokens"));
}

TEST(EmbeddingLayerTest, ForwardAndGradientsForAwkwardShapes) {
  struct Case {
    int64_t b, s, s_max, vocab, d;
  };
  for (const Case c : {Case{1, 1, 1, 3, 1}, Case{2, 3, 5, 3, 4}, Case{3, 4, 4, 7, 3}}) {
    SCOPED_TRACE(str_cat("B ", c.b, " S ", c.s, " S_max ", c.s_max, " V ", c.vocab, " D ", c.d));
    ParameterSet params(&host_context(), DType::kF64);
    Embedding embed("embed", c.vocab, c.d, c.s_max, &params);
    randomize_parameters(&params, 10);
    const Tensor ids = make_ids(c.b, c.s, c.vocab);
    Tensor h = embed.forward(ids).value();
    const double* tok = params.find("embed.tokens")->value.data<double>();
    const double* pos = params.find("embed.positions")->value.data<double>();
    for (int64_t r = 0; r < c.b * c.s; ++r) {
      for (int64_t j = 0; j < c.d; ++j) {
        EXPECT_EQ(h.data<double>()[r * c.d + j],
                  tok[ids.data<int32_t>()[r] * c.d + j] + pos[(r % c.s) * c.d + j]);
      }
    }
    Tensor w = Tensor::empty(h.shape(), DType::kF64);
    fill_uniform(w, 11);
    auto loss = [&]() { return dot(embed.forward(ids).value(), w); };
    ASSERT_TRUE(embed.backward(ids, w).ok());
    for (const auto& f : check_gradients(loss, parameter_targets(params), kFiniteDiff))
      ADD_FAILURE() << f;
    // Gradients accumulate: a second backward doubles them.
    Tensor once = Tensor::copy_of(params.find("embed.positions")->grad);
    ASSERT_TRUE(embed.backward(ids, w).ok());
    for (int64_t i = 0; i < once.numel(); ++i) {
      EXPECT_EQ(params.find("embed.positions")->grad.data<double>()[i], 2 * once.data<double>()[i]);
    }
  }
}

// Without learned positions (a RoPE model): no positions parameter, h is the token rows alone,
// and the backward accumulates into the token table only.
TEST(EmbeddingLayerTest, WithoutLearnedPositions) {
  const int64_t b = 2, s = 3, s_max = 5, vocab = 4, d = 3;
  ParameterSet params(&host_context(), DType::kF64);
  Embedding embed("embed", vocab, d, s_max, &params, false);
  ASSERT_EQ(params.all().size(), 1u);
  EXPECT_EQ(params.find("embed.positions"), nullptr);
  EXPECT_EQ(params.all()[0]->name, "embed.tokens");
  randomize_parameters(&params, 40);
  const Tensor ids = make_ids(b, s, vocab);
  Tensor h = embed.forward(ids).value();
  const double* tok = params.find("embed.tokens")->value.data<double>();
  for (int64_t r = 0; r < b * s; ++r) {
    for (int64_t j = 0; j < d; ++j) {
      EXPECT_EQ(h.data<double>()[r * d + j], tok[ids.data<int32_t>()[r] * d + j]);
    }
  }
  Tensor w = Tensor::empty(h.shape(), DType::kF64);
  fill_uniform(w, 41);
  auto loss = [&]() { return dot(embed.forward(ids).value(), w); };
  ASSERT_TRUE(embed.backward(ids, w).ok());
  for (const auto& f : check_gradients(loss, parameter_targets(params), kFiniteDiff))
    ADD_FAILURE() << f;
  // The sequence length is still bounded by S_max.
  expect_invalid(embed.forward(make_ids(1, s_max + 1, vocab)).status(), {"embed", "S <= 5"});
}

TEST(OutputHeadTest, UntiedForwardAndGradients) {
  const int64_t n = 5, d = 4, vocab = 3;
  ParameterSet params(&host_context(), DType::kF64);
  OutputHead head("head", vocab, d, nullptr, &params);
  ASSERT_NE(params.find("head.weight"), nullptr);
  EXPECT_FALSE(head.tied());
  randomize_parameters(&params, 20);
  Tensor h = Tensor::empty({n, d}, DType::kF64);
  fill_uniform(h, 21);
  Tensor logits = head.forward(h).value();
  const std::vector<double> want =
      naive_matmul(to_vector<double>(h), to_vector<double>(params.find("head.weight")->value), n, d,
                   vocab, /*b_transposed=*/true);
  for (int64_t i = 0; i < n * vocab; ++i) EXPECT_NEAR(logits.data<double>()[i], want[i], 1e-14);
  Tensor w = Tensor::empty(logits.shape(), DType::kF64);
  fill_uniform(w, 22);
  auto loss = [&]() { return dot(head.forward(h).value(), w); };
  Tensor dh = head.backward(h, w).value();
  std::vector<GradTarget> targets = parameter_targets(params);
  targets.push_back({"h", h, dh});
  for (const auto& f : check_gradients(loss, targets, kFiniteDiff)) ADD_FAILURE() << f;
  // The weight gradient accumulates; dh comes out the same.
  Tensor once = Tensor::copy_of(params.find("head.weight")->grad);
  EXPECT_TRUE(bitwise_equal(head.backward(h, w).value(), dh));
  for (int64_t i = 0; i < once.numel(); ++i) {
    // A BLAS may fold the old gradient into its sum (beta = 1): equal up to rounding.
    const double want = 2 * once.data<double>()[i];
    EXPECT_NEAR(params.find("head.weight")->grad.data<double>()[i], want,
                1e-14 * (1 + std::abs(want)));
  }
}

TEST(OutputHeadTest, TiedHeadAccumulatesIntoTheTokenTable) {
  const int64_t b = 2, s = 3, d = 4, vocab = 5;
  ParameterSet params(&host_context(), DType::kF64);
  Embedding embed("embed", vocab, d, s, &params);
  OutputHead head("head", vocab, d, &embed.tokens(), &params);
  EXPECT_TRUE(head.tied());
  EXPECT_EQ(params.find("head.weight"), nullptr);
  EXPECT_EQ(params.all().size(), 2u);
  randomize_parameters(&params, 30);
  const Tensor ids = make_ids(b, s, vocab);
  Tensor h;
  Tensor w = Tensor::empty({b * s, vocab}, DType::kF64);
  fill_uniform(w, 31);
  // L = sum(w * (embed(ids) T^T)): the table enters twice.
  auto loss = [&]() {
    h = embed.forward(ids).value();
    return dot(head.forward(h).value(), w);
  };
  loss();
  Tensor dh = head.backward(h, w).value();
  ASSERT_TRUE(embed.backward(ids, dh).ok());
  for (const auto& f : check_gradients(loss, parameter_targets(params), kFiniteDiff))
    ADD_FAILURE() << f;
  // A second micro-batch's backward adds to the table's gradient (the head's part included).
  Tensor once = Tensor::copy_of(embed.tokens().grad);
  loss();
  dh = head.backward(h, w).value();
  ASSERT_TRUE(embed.backward(ids, dh).ok());
  for (int64_t i = 0; i < once.numel(); ++i) {
    EXPECT_NEAR(embed.tokens().grad.data<double>()[i], 2 * once.data<double>()[i], 1e-14);
  }
}

TEST(EmbeddingLayerTest, BadArgumentsNameTheLayerAndArgument) {
  ParameterSet params(&host_context(), DType::kF32);
  Embedding embed("embed", 3, 2, 4, &params);
  OutputHead head("head", 3, 2, nullptr, &params);
  ASSERT_TRUE(params.allocate().ok());
  Tensor h = Tensor::zeros({4, 2}, DType::kF32);
  expect_invalid(embed.forward(Tensor::from_vector<int32_t>({2, 2}, {0, 1, 3, 2})).status(),
                 {"embed", "id 3 at position 2"});
  expect_invalid(embed.forward(Tensor::from_vector<int64_t>({2, 2}, {0, 1, 1, 2})).status(),
                 {"embed", "ids"});
  expect_invalid(embed.forward(Tensor::zeros({1, 5}, DType::kI32)).status(),
                 {"embed", "ids", "S <= 4"});
  expect_invalid(
      embed.backward(Tensor::zeros({2, 2}, DType::kI32), Tensor::zeros({3, 2}, DType::kF32)),
      {"embed", "dh"});
  expect_invalid(
      embed.backward(Tensor::zeros({2, 2}, DType::kI32), Tensor::zeros({4, 2}, DType::kF64)),
      {"embed", "dh"});
  Tensor logits = Tensor::zeros({4, 3}, DType::kF32);
  expect_invalid(head.forward(Tensor::zeros({4, 3}, DType::kF32)).status(), {"head", "h"});
  expect_invalid(head.forward(Tensor::zeros({4, 2}, DType::kF64)).status(), {"head", "h"});
  expect_invalid(head.backward(h, Tensor::zeros({4, 4}, DType::kF32)).status(),
                 {"head", "d_logits"});
  expect_invalid(head.backward(h, Tensor::zeros({3, 3}, DType::kF32)).status(),
                 {"head", "d_logits"});
}

}  // namespace
}  // namespace moe::testing
