// DenseFfn layer (core/layers/dense_ffn.h): parameter registration (gated and bias-free shapes),
// forward against explicit loops for each activation, SwiGLU included, with and without biases
// (and with the hidden dropout mask keyed by global token id), gradients of x and every parameter
// against central finite differences in f64, masks independent of how rows are split,
// accumulation of parameter gradients, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "core/layers/dense_ffn.h"
#include "tests/core/dense_layer_test_util.h"
#include "tests/testing/cross_path.h"

namespace moe::testing {
namespace {

double activate(ExpertActivation act, double x) {
  switch (act) {
    case ExpertActivation::kRelu:
      return x > 0 ? x : 0;
    case ExpertActivation::kGelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case ExpertActivation::kGeluTanh:
      return 0.5 * x *
             (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case ExpertActivation::kSwiglu:
      return x / (1 + std::exp(-x));  // the gate's SiLU (see hidden())
  }
  return x;
}

// The hidden rows h [n, f] from the pre-activation [n, f], or [n, 2f] = [gate | up] when gated:
// silu(gate) * up, as transformers' LlamaMLP computes act_fn(gate_proj(x)) * up_proj(x).
std::vector<double> hidden(ExpertActivation act, const std::vector<double>& h_pre, int64_t n,
                           int64_t f) {
  std::vector<double> h(n * f);
  const int64_t cols = is_gated(act) ? 2 * f : f;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < f; ++j) {
      const double a = activate(act, h_pre[r * cols + j]);
      h[r * f + j] = is_gated(act) ? a * h_pre[r * cols + f + j] : a;
    }
  }
  return h;
}

// The hidden dropout scale of rows [token_offset, token_offset + n): the dropout kernel applied
// to ones with rows keyed by global token id (the contract DenseFfn promises to use).
std::vector<double> dropout_scale(int64_t n, int64_t f, int64_t token_offset, CounterRng rng,
                                  float p) {
  Tensor ones = Tensor::empty({n, f}, DType::kF64);
  for (int64_t i = 0; i < n * f; ++i) ones.data<double>()[i] = 1.0;
  if (p == 0.f) return to_vector<double>(ones);
  Tensor keys = Tensor::empty({n}, DType::kI64);
  for (int64_t t = 0; t < n; ++t) keys.data<int64_t>()[t] = token_offset + t;
  EXPECT_TRUE(kernels::dropout_forward(host_context(), ones, keys, 0, rng, p, ones).ok());
  return to_vector<double>(ones);
}

void expect_parameters(const ParameterSet& params,
                       const std::vector<std::pair<std::string, Shape>>& want) {
  ASSERT_EQ(params.all().size(), want.size());
  for (const auto& [name, shape] : want) {
    const Parameter* p = params.find(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ(p->shape, shape) << name;
    EXPECT_EQ(p->weight_decay, name.find(".w") != std::string::npos) << name;
  }
}

TEST(DenseFfnTest, RegistersNamedParameters) {
  ParameterSet params(&host_context(), DType::kF32);
  DenseFfn ffn("blocks.0.ffn", 4, 10, ExpertActivation::kGelu, true, 0.1, &params);
  expect_parameters(params, {{"blocks.0.ffn.w1", {4, 10}},
                             {"blocks.0.ffn.b1", {10}},
                             {"blocks.0.ffn.w2", {10, 4}},
                             {"blocks.0.ffn.b2", {4}}});
}

// SwiGLU's first matrix holds [W_gate | W_up]: [D, 2F], and its bias [2F]; without biases only
// the matrices are registered.
TEST(DenseFfnTest, GatedAndBiasFreeShapes) {
  ParameterSet gated(&host_context(), DType::kF32);
  DenseFfn a("ffn", 4, 10, ExpertActivation::kSwiglu, true, 0.1, &gated);
  expect_parameters(gated,
                    {{"ffn.w1", {4, 20}}, {"ffn.b1", {20}}, {"ffn.w2", {10, 4}}, {"ffn.b2", {4}}});
  ParameterSet bias_free(&host_context(), DType::kF32);
  DenseFfn b("ffn", 4, 10, ExpertActivation::kSwiglu, false, 0.1, &bias_free);
  expect_parameters(bias_free, {{"ffn.w1", {4, 20}}, {"ffn.w2", {10, 4}}});
  ParameterSet plain(&host_context(), DType::kF32);
  DenseFfn c("ffn", 4, 10, ExpertActivation::kRelu, false, 0.1, &plain);
  expect_parameters(plain, {{"ffn.w1", {4, 10}}, {"ffn.w2", {10, 4}}});
}

struct FfnCase {
  int64_t n, d, f;
  ExpertActivation act;
  bool training;
  bool bias = true;
};

std::string name(const FfnCase& c) {
  const char* act = c.act == ExpertActivation::kRelu       ? "relu"
                    : c.act == ExpertActivation::kGelu     ? "gelu"
                    : c.act == ExpertActivation::kGeluTanh ? "gelu_tanh"
                                                           : "swiglu";
  return str_cat("N", c.n, "_D", c.d, "_F", c.f, "_", act, c.training ? "_train" : "_eval",
                 c.bias ? "" : "_nobias");
}
void PrintTo(const FfnCase& c, std::ostream* os) { *os << name(c); }

class DenseFfnCases : public ::testing::TestWithParam<FfnCase> {};

TEST_P(DenseFfnCases, ForwardMatchesLoopsAndGradientsMatchDifferences) {
  const FfnCase c = GetParam();
  const float p = 0.25f;
  const int64_t token_offset = 13;
  const CounterRng rng{6, make_stream(RngTag::kTest, 11, 2)};
  ParameterSet params(&host_context(), DType::kF64);
  DenseFfn ffn("ffn", c.d, c.f, c.act, c.bias, p, &params);
  randomize_parameters(&params, 70);
  Tensor x = Tensor::empty({c.n, c.d}, DType::kF64);
  fill_uniform(x, 71, -1, 1);
  DenseFfn::Saved saved;
  StatusOr<Tensor> out = ffn.forward(x, token_offset, c.training, rng, &saved);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  Tensor y = *out;

  // A bias-free layer has no b1, b2 (none added: naive_matmul's empty bias).
  const auto get = [&](const char* leaf) {
    const Parameter* param = params.find(str_cat("ffn.", leaf));
    return param != nullptr ? to_vector<double>(param->value) : std::vector<double>{};
  };
  EXPECT_EQ(get("b1").empty(), !c.bias);
  const int64_t f1 = is_gated(c.act) ? 2 * c.f : c.f;
  const std::vector<double> h_pre =
      naive_matmul(to_vector<double>(x), get("w1"), c.n, c.d, f1, false, get("b1"));
  std::vector<double> h = hidden(c.act, h_pre, c.n, c.f);
  const std::vector<double> mask = dropout_scale(c.n, c.f, token_offset, rng, c.training ? p : 0.f);
  for (size_t i = 0; i < h.size(); ++i) h[i] *= mask[i];
  const std::vector<double> want = naive_matmul(h, get("w2"), c.n, c.f, c.d, false, get("b2"));
  for (int64_t i = 0; i < c.n * c.d; ++i) EXPECT_NEAR(y.data<double>()[i], want[i], 1e-13) << i;

  Tensor w = Tensor::empty(y.shape(), DType::kF64);
  fill_uniform(w, 72);
  auto loss = [&]() {
    DenseFfn::Saved s;
    return dot(ffn.forward(x, token_offset, c.training, rng, &s).value(), w);
  };
  Tensor dx = ffn.backward(w, saved).value();
  std::vector<GradTarget> targets = parameter_targets(params);
  targets.push_back({"x", x, dx});
  for (const auto& f : check_gradients(loss, targets, kFiniteDiff)) ADD_FAILURE() << f;

  // Parameter gradients accumulate; dx comes out the same.
  Tensor w1_once = Tensor::copy_of(params.find("ffn.w1")->grad);
  StatusOr<Tensor> dx_again = ffn.backward(w, saved);
  ASSERT_TRUE(dx_again.ok());
  EXPECT_TRUE(bitwise_equal(*dx_again, dx));
  for (int64_t i = 0; i < w1_once.numel(); ++i) {
    // A BLAS may fold the old gradient into its sum (beta = 1): equal up to rounding.
    const double want = 2 * w1_once.data<double>()[i];
    EXPECT_NEAR(params.find("ffn.w1")->grad.data<double>()[i], want, 1e-14 * (1 + std::abs(want)));
  }
}

// ReLU is only checked where no pre-activation sits near its kink (the fixed seeds ensure that).
INSTANTIATE_TEST_SUITE_P(Cases, DenseFfnCases,
                         ::testing::Values(FfnCase{1, 1, 1, ExpertActivation::kGelu, false},
                                           FfnCase{5, 3, 7, ExpertActivation::kGelu, true},
                                           FfnCase{4, 4, 5, ExpertActivation::kGeluTanh, true},
                                           FfnCase{3, 5, 6, ExpertActivation::kGeluTanh, false},
                                           FfnCase{6, 3, 4, ExpertActivation::kRelu, true},
                                           FfnCase{1, 1, 1, ExpertActivation::kSwiglu, false},
                                           FfnCase{5, 3, 7, ExpertActivation::kSwiglu, true},
                                           FfnCase{4, 5, 3, ExpertActivation::kSwiglu, true, false},
                                           FfnCase{3, 4, 6, ExpertActivation::kGelu, true, false},
                                           FfnCase{4, 3, 5, ExpertActivation::kRelu, false, false}),
                         [](const ::testing::TestParamInfo<FfnCase>& info) {
                           return name(info.param);
                         });

// The hidden dropout mask is keyed by the global token id, so a batch split into parts (each with
// its global offset) drops the same hidden units as the whole. Cross-path equality (tests/testing/
// cross_path.h): the mask, the decision, is compared exactly (the zeros of h: GELU is never
// exactly 0 here), then the outputs within float32 epsilon x the sublayer's depth x their
// magnitude: the parts' products have other shapes than the whole's (3 rows against 6), and no
// BLAS promises a row the same bits in both (OpenBLAS's generic SSE3 kernel does not give them).
TEST(DenseFfnTest, DropoutMaskFollowsGlobalTokenIds) {
  const int64_t n = 6, d = 3, f = 8;
  ParameterSet params(&host_context(), DType::kF32);
  DenseFfn ffn("ffn", d, f, ExpertActivation::kGelu, true, 0.5, &params);
  randomize_parameters(&params, 80);
  Tensor x = Tensor::empty({n, d}, DType::kF32);
  fill_uniform(x, 81);
  const CounterRng rng{9, make_stream(RngTag::kTest, 12, 0)};
  DenseFfn::Saved saved;
  Tensor y = ffn.forward(x, 100, true, rng, &saved).value();
  auto dropped = [](const TensorView& h) {
    std::vector<bool> out;
    for (int64_t i = 0; i < h.numel(); ++i) out.push_back(h.data<float>()[i] == 0.0f);
    return out;
  };
  const std::vector<bool> whole_mask = dropped(saved.h.view());
  const int64_t n_dropped = std::count(whole_mask.begin(), whole_mask.end(), true);
  ASSERT_GT(n_dropped, 0);
  ASSERT_LT(n_dropped, n * f);
  const int64_t half_rows = n / 2;
  for (int64_t half = 0; half < 2; ++half) {
    const int64_t r0 = half * half_rows, r1 = r0 + half_rows;
    DenseFfn::Saved s;
    StatusOr<Tensor> part = ffn.forward(x.rows(r0, r1), 100 + r0, true, rng, &s);
    ASSERT_TRUE(part.ok());
    EXPECT_EQ(dropped(s.h.view()), dropped(saved.h.view().rows(r0, r1))) << half;
    const TensorView whole_rows = y.view().rows(r0, r1);
    double magnitude = 0;
    for (int64_t i = 0; i < whole_rows.numel(); ++i) {
      magnitude = std::max(magnitude, std::fabs(static_cast<double>(whole_rows.data<float>()[i])));
    }
    EXPECT_TRUE(values_within(str_cat("half ", half), *part, whole_rows,
                              rounding_tolerance(kF32Eps, ForwardStages::kDense, magnitude)));
    // Keyed by the global id: the second half at the first half's offset drops other units.
    if (half == 1) {
      DenseFfn::Saved wrong;
      ASSERT_TRUE(ffn.forward(x.rows(r0, r1), 100, true, rng, &wrong).ok());
      EXPECT_NE(dropped(wrong.h.view()), dropped(saved.h.view().rows(r0, r1)));
    }
  }
  // Evaluation mode draws no mask.
  Tensor eval = ffn.forward(x, 100, false, rng, &saved).value();
  Tensor eval2 = ffn.forward(x, 0, false, CounterRng{}, &saved).value();
  EXPECT_TRUE(bitwise_equal(eval, eval2));
  EXPECT_FALSE(bitwise_equal(eval, y));
}

TEST(DenseFfnTest, BadArgumentsNameTheLayer) {
  ParameterSet params(&host_context(), DType::kF32);
  DenseFfn ffn("blocks.3.ffn", 4, 6, ExpertActivation::kRelu, true, 0.0, &params);
  ASSERT_TRUE(params.allocate().ok());
  DenseFfn::Saved saved;
  Tensor x = Tensor::zeros({5, 4}, DType::kF32);
  ASSERT_TRUE(ffn.forward(x, 0, true, {}, &saved).ok());
  expect_invalid(ffn.forward(Tensor::zeros({5, 3}, DType::kF32), 0, true, {}, &saved).status(),
                 {"blocks.3.ffn", "x"});
  expect_invalid(ffn.forward(Tensor::zeros({20}, DType::kF32), 0, true, {}, &saved).status(),
                 {"blocks.3.ffn", "x"});
  expect_invalid(ffn.forward(Tensor::zeros({5, 4}, DType::kF64), 0, true, {}, &saved).status(),
                 {"blocks.3.ffn", "x"});
  expect_invalid(ffn.backward(Tensor::zeros({5, 5}, DType::kF32), saved).status(),
                 {"blocks.3.ffn", "dy"});
}

}  // namespace
}  // namespace moe::testing
