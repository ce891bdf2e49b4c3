// LayerNorm layer (core/layers/layer_norm.h), both kinds: parameter registration (RMSNorm has no
// beta), forward against explicit loops in double, the input saved without a copy, gradients of
// x and the parameters against central finite differences in f64, and errors that name the layer.
#include <gtest/gtest.h>

#include <cmath>

#include "core/layers/layer_norm.h"
#include "tests/core/dense_layer_test_util.h"

namespace moe::testing {
namespace {

// The layer's backward against central finite differences of sum(y * w), w fixed: the parameters'
// gradients and dL/dx, from the forward that filled `saved`.
void expect_gradients(const LayerNorm& ln, const ParameterSet& params, const Tensor& x,
                      const LayerNorm::Saved& saved) {
  Tensor w = Tensor::empty(x.shape(), DType::kF64);
  fill_uniform(w, 42);
  auto loss = [&]() {
    LayerNorm::Saved s;
    return dot(ln.forward(x, &s).value(), w);
  };
  StatusOr<Tensor> dx = ln.backward(w, saved);
  ASSERT_TRUE(dx.ok());
  std::vector<GradTarget> targets = parameter_targets(params);
  targets.push_back({"x", x, *dx});
  for (const auto& f : check_gradients(loss, targets, kFiniteDiff)) ADD_FAILURE() << f;
}

TEST(LayerNormLayerTest, RegistersUndecayedGammaAndBeta) {
  ParameterSet params(&host_context(), DType::kF32);
  LayerNorm ln("blocks.0.ln1", 6, &params);
  for (const char* name : {"blocks.0.ln1.gamma", "blocks.0.ln1.beta"}) {
    const Parameter* p = params.find(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ(p->shape, Shape{6});
    EXPECT_FALSE(p->weight_decay);
  }
}

TEST(LayerNormLayerTest, ForwardAndGradients) {
  struct Case {
    int64_t n, d;
  };
  for (const Case c : {Case{1, 1}, Case{1, 4}, Case{5, 3}, Case{6, 7}}) {
    SCOPED_TRACE(str_cat("N ", c.n, " D ", c.d));
    ParameterSet params(&host_context(), DType::kF64);
    const double eps = 1e-3;
    LayerNorm ln("ln", c.d, &params, eps);
    randomize_parameters(&params, 40, 0.5, 1.5);
    Tensor x = Tensor::empty({c.n, c.d}, DType::kF64);
    fill_uniform(x, 41, -2, 2);
    LayerNorm::Saved saved;
    StatusOr<Tensor> out = ln.forward(x, &saved);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    Tensor y = *out;
    EXPECT_TRUE(saved.x.view().same_data(x));  // saved by reference, not copied
    const double* g = params.find("ln.gamma")->value.data<double>();
    const double* b = params.find("ln.beta")->value.data<double>();
    for (int64_t r = 0; r < c.n; ++r) {
      const double* row = x.data<double>() + r * c.d;
      double m = 0, v = 0;
      for (int64_t j = 0; j < c.d; ++j) m += row[j] / c.d;
      for (int64_t j = 0; j < c.d; ++j) v += (row[j] - m) * (row[j] - m) / c.d;
      for (int64_t j = 0; j < c.d; ++j) {
        EXPECT_NEAR(y.data<double>()[r * c.d + j], (row[j] - m) / std::sqrt(v + eps) * g[j] + b[j],
                    1e-13);
      }
    }
    expect_gradients(ln, params, x, saved);
  }
}

TEST(LayerNormLayerTest, RmsNormRegistersOnlyAnUndecayedGamma) {
  ParameterSet params(&host_context(), DType::kF32);
  LayerNorm ln("blocks.0.ln1", 6, &params, 1e-6, NormKind::kRmsNorm);
  const Parameter* g = params.find("blocks.0.ln1.gamma");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->shape, Shape{6});
  EXPECT_FALSE(g->weight_decay);
  EXPECT_EQ(params.find("blocks.0.ln1.beta"), nullptr);
  EXPECT_EQ(params.all().size(), 1u);
}

TEST(LayerNormLayerTest, RmsNormForwardAndGradients) {
  struct Case {
    int64_t n, d;
  };
  for (const Case c : {Case{1, 1}, Case{1, 4}, Case{5, 3}, Case{6, 7}}) {
    SCOPED_TRACE(str_cat("N ", c.n, " D ", c.d));
    ParameterSet params(&host_context(), DType::kF64);
    const double eps = 1e-3;
    LayerNorm ln("ln", c.d, &params, eps, NormKind::kRmsNorm);
    randomize_parameters(&params, 40, 0.5, 1.5);
    Tensor x = Tensor::empty({c.n, c.d}, DType::kF64);
    fill_uniform(x, 41, -2, 2);
    LayerNorm::Saved saved;
    StatusOr<Tensor> out = ln.forward(x, &saved);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    Tensor y = *out;
    EXPECT_TRUE(saved.x.view().same_data(x));  // saved by reference, not copied
    EXPECT_EQ(saved.mean.numel(), 0);          // RMSNorm has no mean to save
    const double* g = params.find("ln.gamma")->value.data<double>();
    for (int64_t r = 0; r < c.n; ++r) {
      const double* row = x.data<double>() + r * c.d;
      double ms = 0;
      for (int64_t j = 0; j < c.d; ++j) ms += row[j] * row[j] / c.d;
      for (int64_t j = 0; j < c.d; ++j) {
        EXPECT_NEAR(y.data<double>()[r * c.d + j], row[j] / std::sqrt(ms + eps) * g[j], 1e-13);
      }
    }
    expect_gradients(ln, params, x, saved);
  }
}

TEST(LayerNormLayerTest, BadArgumentsNameTheLayer) {
  for (NormKind kind : {NormKind::kLayerNorm, NormKind::kRmsNorm}) {
    SCOPED_TRACE(kind == NormKind::kRmsNorm ? "RMSNorm" : "LayerNorm");
    ParameterSet params(&host_context(), DType::kF32);
    LayerNorm ln("final_ln", 4, &params, 1e-5, kind);
    ASSERT_TRUE(params.allocate().ok());
    LayerNorm::Saved saved;
    Tensor x = Tensor::zeros({2, 4}, DType::kF32);
    expect_invalid(ln.forward(Tensor::zeros({8}, DType::kF32), &saved).status(), {"final_ln", "x"});
    expect_invalid(ln.forward(Tensor::zeros({2, 3}, DType::kF32), &saved).status(),
                   {"final_ln", "gamma"});
    expect_invalid(ln.forward(Tensor::zeros({2, 4}, DType::kF64), &saved).status(),
                   {"final_ln", "gamma"});
    ASSERT_TRUE(ln.forward(x, &saved).ok());
    expect_invalid(ln.backward(Tensor::zeros({3, 4}, DType::kF32), saved).status(),
                   {"final_ln", "dy"});
  }
}

}  // namespace
}  // namespace moe::testing
