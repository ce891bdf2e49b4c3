// Residual dynamics (kernels/residual.h) against the equations by hand (plain, heavy-ball in both
// sign conventions, Adam with eps inside and outside the square root), the backward of every form
// against central finite differences in f64 (through x, u and the incoming state), the robust
// input shift, bf16 activations with fp32 state, and argument errors.
#include "kernels/residual.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"

namespace moe::kernels {
namespace {

using moe::testing::check_gradients;
using moe::testing::dot;
using moe::testing::fill_uniform;

Context& ctx() { return testing::host_context(); }

ResidualArgs momentum(double mu, double a_input, double a_out) {
  ResidualArgs a;
  a.form = ResidualForm::kMomentum;
  a.a_state = mu;
  a.a_input = a_input;
  a.a_out = a_out;
  return a;
}

ResidualArgs adam(bool inside) {
  ResidualArgs a;
  a.form = ResidualForm::kAdam;
  a.a_state = 0.7;
  a.beta1 = 0.9;
  a.beta2 = 0.99;
  a.eps = 1e-3;
  a.eps_inside_sqrt = inside;
  a.kappa = 0.25;
  a.gamma = 0.5;
  a.adam_sign = -1;
  return a;
}

TEST(ResidualTest, ForwardEquationsByHand) {
  Tensor x = Tensor::from_vector<double>({1, 2}, {1.0, -2.0});
  Tensor u = Tensor::from_vector<double>({1, 2}, {0.5, 4.0});
  Tensor p = Tensor::from_vector<double>({1, 2}, {2.0, 1.0});
  Tensor out = Tensor::empty({1, 2}, DType::kF64), p_out = Tensor::empty({1, 2}, DType::kF64);
  ResidualArgs plain;
  ASSERT_TRUE(residual_forward(ctx(), plain, x, u, {p, {}, {}}, out, {p_out, {}, {}}).ok());
  EXPECT_EQ(to_vector<double>(out), (std::vector<double>{1.5, 2.0}));
  EXPECT_EQ(to_vector<double>(p_out), (std::vector<double>{2.0, 1.0}));  // passed through
  // Paper: p = u + mu p; out = x + gamma p (mu 0.5, gamma 2).
  ASSERT_TRUE(
      residual_forward(ctx(), momentum(0.5, 1.0, 2.0), x, u, {p, {}, {}}, out, {p_out, {}, {}})
          .ok());
  EXPECT_EQ(to_vector<double>(p_out), (std::vector<double>{1.5, 4.5}));
  EXPECT_EQ(to_vector<double>(out), (std::vector<double>{4.0, 7.0}));
  // Reference code: m = mu m + gamma u; out = x - m. An empty p_in is zero.
  ASSERT_TRUE(
      residual_forward(ctx(), momentum(0.5, 2.0, -1.0), x, u, {{}, {}, {}}, out, {p_out, {}, {}})
          .ok());
  EXPECT_EQ(to_vector<double>(p_out), (std::vector<double>{1.0, 8.0}));
  EXPECT_EQ(to_vector<double>(out), (std::vector<double>{0.0, -10.0}));
  // Adam (eps outside): m = 0.1 u, v = 0.01 u^2 from zero moments.
  Tensor m_out = Tensor::empty({1, 2}, DType::kF64), v_out = Tensor::empty({1, 2}, DType::kF64);
  for (bool inside : {false, true}) {
    const ResidualArgs a = adam(inside);
    ASSERT_TRUE(residual_forward(ctx(), a, x, u, {p, {}, {}}, out, {p_out, m_out, v_out}).ok());
    for (int i = 0; i < 2; ++i) {
      const double ui = u.data<double>()[i], m = 0.1 * ui, v = 0.01 * ui * ui;
      const double denom = inside ? std::sqrt(v + a.eps) : std::sqrt(v) + a.eps;
      EXPECT_NEAR(m_out.data<double>()[i], m, 1e-15);
      EXPECT_NEAR(v_out.data<double>()[i], v, 1e-15);
      EXPECT_NEAR(out.data<double>()[i], 0.75 * x.data<double>()[i] - 0.5 * m / denom, 1e-15);
      EXPECT_NEAR(p_out.data<double>()[i], 0.7 * p.data<double>()[i] + ui, 1e-15);
    }
  }
}

TEST(ResidualTest, BackwardMatchesFiniteDifferences) {
  const int64_t t = 3, d = 4;
  const std::vector<std::pair<std::string, ResidualArgs>> forms = {
      {"plain", ResidualArgs{}},
      {"momentum_paper", momentum(0.7, 1.0, 1.5)},
      {"momentum_refcode", momentum(0.7, 1.5, -1.0)},
      {"adam_outside", adam(false)},
      {"adam_inside", adam(true)}};
  for (const auto& [name, a] : forms) {
    SCOPED_TRACE(name);
    const bool is_adam = a.form == ResidualForm::kAdam;
    auto make = [&](uint64_t seed, double lo, double hi) {
      Tensor v = Tensor::empty({t, d}, DType::kF64);
      fill_uniform(v, seed, lo, hi);
      return v;
    };
    Tensor x = make(1, -1, 1), u = make(2, -1, 1), p = make(3, -1, 1);
    Tensor m_in = make(4, -0.2, 0.2), v_in = make(5, 0.05, 0.3);
    Tensor w_out = make(6, -1, 1), w_p = make(7, -1, 1), w_m = make(8, -1, 1), w_v = make(9, -1, 1);
    Tensor out = make(0, 0, 0), p_out = make(0, 0, 0), m_out = make(0, 0, 0), v_out = make(0, 0, 0);
    auto loss = [&]() {
      EXPECT_TRUE(
          residual_forward(
              ctx(), a, x, u,
              {p, is_adam ? m_in.view() : TensorView(), is_adam ? v_in.view() : TensorView()}, out,
              {p_out, is_adam ? m_out.view() : TensorView(), is_adam ? v_out.view() : TensorView()})
              .ok());
      return dot(out, w_out) + dot(p_out, w_p) + (is_adam ? dot(m_out, w_m) + dot(v_out, w_v) : 0);
    };
    loss();
    Tensor dx = make(10, 0, 1), du = make(11, 0, 1), dp = make(12, 0, 1);  // overwritten
    Tensor dm = make(13, 0, 1), dv = make(14, 0, 1);
    ASSERT_TRUE(
        residual_backward(
            ctx(), a, w_out,
            {w_p, is_adam ? w_m.view() : TensorView(), is_adam ? w_v.view() : TensorView()}, u,
            {{}, m_out, v_out},
            {dx, du, {dp, is_adam ? dm.view() : TensorView(), is_adam ? dv.view() : TensorView()}})
            .ok());
    std::vector<moe::testing::GradTarget> targets = {{"x", x, dx}, {"u", u, du}, {"p", p, dp}};
    if (is_adam) {
      targets.push_back({"m_in", m_in, dm});
      targets.push_back({"v_in", v_in, dv});
    }
    for (const auto& f : check_gradients(loss, targets, {1e-6, 1e-8, 1e-6})) ADD_FAILURE() << f;
  }
}

// bf16 activations, fp32 state: the state is computed in double and stored in f32, the output
// rounded once to bf16 — the f32 path on the same inputs, rounded.
TEST(ResidualTest, Bf16ActivationsWithF32State) {
  Tensor x16 = Tensor::empty({2, 3}, DType::kBF16), u16 = Tensor::empty({2, 3}, DType::kBF16);
  fill_uniform(x16, 21);
  fill_uniform(u16, 22);
  Tensor xf = Tensor::empty({2, 3}, DType::kF32), uf = Tensor::empty({2, 3}, DType::kF32);
  for (int i = 0; i < 6; ++i) {
    xf.data<float>()[i] = static_cast<float>(x16.data<bf16>()[i]);
    uf.data<float>()[i] = static_cast<float>(u16.data<bf16>()[i]);
  }
  Tensor p = Tensor::empty({2, 3}, DType::kF32);
  fill_uniform(p, 23);
  Tensor out16 = Tensor::empty({2, 3}, DType::kBF16), outf = Tensor::empty({2, 3}, DType::kF32);
  Tensor p16 = Tensor::empty({2, 3}, DType::kF32), pf = Tensor::empty({2, 3}, DType::kF32);
  const ResidualArgs a = momentum(0.7, 1.0, 1.0);
  ASSERT_TRUE(residual_forward(ctx(), a, x16, u16, {p, {}, {}}, out16, {p16, {}, {}}).ok());
  ASSERT_TRUE(residual_forward(ctx(), a, xf, uf, {p, {}, {}}, outf, {pf, {}, {}}).ok());
  EXPECT_TRUE(moe::testing::bitwise_equal(p16, pf));
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(static_cast<float>(out16.data<bf16>()[i]), outf.data<float>()[i],
                std::fabs(outf.data<float>()[i]) / 128 + 1e-7);
  }
  // The state is F: a bf16 state is refused.
  EXPECT_EQ(residual_forward(ctx(), a, x16, u16, {Tensor::zeros({2, 3}, DType::kBF16), {}, {}},
                             out16, {p16, {}, {}})
                .code(),
            StatusCode::kInvalidArgument);
  // Robust shift: y = x + a p (act + F -> act).
  Tensor y = Tensor::empty({2, 3}, DType::kF32);
  ASSERT_TRUE(residual_shift_input(ctx(), xf, p, 0.5, y).ok());
  for (int i = 0; i < 6; ++i) {
    EXPECT_FLOAT_EQ(y.data<float>()[i], xf.data<float>()[i] + 0.5f * p.data<float>()[i]);
  }
}

TEST(ResidualTest, BadArgumentsAreInvalidArgument) {
  Tensor x = Tensor::zeros({2, 3}, DType::kF32), out = Tensor::zeros({2, 3}, DType::kF32);
  const ResidualArgs a = adam(false);
  EXPECT_EQ(residual_forward(ctx(), a, x, x, {{}, {}, {}}, out, {out, {}, {}}).code(),
            StatusCode::kInvalidArgument);  // Adam needs m_out, v_out
  EXPECT_EQ(residual_forward(ctx(), ResidualArgs{}, x, Tensor::zeros({3, 2}, DType::kF32),
                             {{}, {}, {}}, out, {out, {}, {}})
                .code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::kernels
