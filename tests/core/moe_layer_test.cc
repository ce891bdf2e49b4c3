// MoE layer behaviour beyond single-layer gradients: the momentum recurrence over a 3-layer stack
// with a dense sublayer in between (forward against a hand-computed recurrence, backward against
// finite differences), mu = 0 / gamma = 1 reproducing plain SMoE bit for bit, robust and Adam
// against their equations, capacity drops and dropless mode, SparseMixer's router gradient,
// SwiGLU experts with and without biases against a hand computation, DeepSeek-V3's sigmoid
// gates and sequence-wise loss, statistics and determinism.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/router.h"
#include "tests/core/moe_layer_test_util.h"
#include "tests/testing/cross_path.h"

namespace moe::testing {
namespace {

// A stack: MoE layer 0 -> dense sublayer (x <- x + tanh(x) / 2, p untouched) -> MoE 1 -> MoE 2.
// Every MoE layer has its own parameters (seeded by its index).
struct Stack {
  std::vector<std::unique_ptr<LayerHarness>> layers;
  Tensor x0;
  Tensor w_final;  // L = <w_final, x_final>
  int64_t tokens;
  int64_t d;

  Stack(const MoeLayerConfig& cfg, int64_t num_tokens) : tokens(num_tokens), d(cfg.d_model) {
    for (int i = 0; i < 3; ++i) {
      layers.push_back(std::make_unique<LayerHarness>(cfg, tokens, 500 + 17 * i));
    }
    x0 = Tensor::empty({tokens, d}, DType::kF64);
    w_final = Tensor::empty({tokens, d}, DType::kF64);
    fill_uniform(x0, 91, -1.5, 1.5);
    fill_uniform(w_final, 92);
  }

  static void dense(const Tensor& in, Tensor* out) {
    for (int64_t i = 0; i < in.numel(); ++i)
      out->data<double>()[i] = in.data<double>()[i] + 0.5 * std::tanh(in.data<double>()[i]);
  }

  // Forward through the stack; saves each layer's inputs and returns x_final.
  Tensor forward(std::vector<MoeLayerSaved>* saved, std::vector<Tensor>* inputs,
                 std::vector<Tensor>* p_inputs, Tensor* dense_in) {
    saved->clear();
    saved->resize(3);
    inputs->clear();
    p_inputs->clear();
    Tensor x = Tensor::copy_of(x0);
    Tensor p = Tensor::zeros({tokens, d}, DType::kF64);  // p_0 = 0
    Tensor top1 = Tensor::empty({tokens}, DType::kI32);
    for (int i = 0; i < 3; ++i) {
      if (i == 1) {
        *dense_in = Tensor::copy_of(x);
        Tensor y = Tensor::empty({tokens, d}, DType::kF64);
        dense(x, &y);
        x = std::move(y);
      }
      inputs->push_back(Tensor::copy_of(x));
      p_inputs->push_back(Tensor::copy_of(p));
      MoeLayerInputs in;
      in.x_in = x;
      in.x_base = x;
      in.p_in = p;
      if (i > 0) in.prev_top1 = top1;
      in.token_offset = 0;
      in.seed = 3;
      StatusOr<MoeLayerOutputs> o = layers[i]->layer->forward(in, &(*saved)[i]);
      EXPECT_TRUE(o.ok()) << o.status().to_string();
      x = o->out;
      p = o->p_out;
      top1 = o->top1;
    }
    return x;
  }

  double loss() {
    std::vector<MoeLayerSaved> saved;
    std::vector<Tensor> inputs, p_inputs;
    Tensor dense_in;
    Tensor x = forward(&saved, &inputs, &p_inputs, &dense_in);
    double aux = 0;
    for (const MoeLayerSaved& s : saved) aux += aux_loss(s);  // backward uses aux_scale = 1
    return dot(x, w_final) + aux;
  }

  // Backward through the stack; returns dL/dx0 and leaves parameter gradients in each layer.
  Tensor backward() {
    std::vector<MoeLayerSaved> saved;
    std::vector<Tensor> inputs, p_inputs;
    Tensor dense_in;
    forward(&saved, &inputs, &p_inputs, &dense_in);
    Tensor dx = Tensor::copy_of(w_final);
    Tensor dp = Tensor::zeros({tokens, d}, DType::kF64);  // nothing reads the last p
    for (int i = 2; i >= 0; --i) {
      EXPECT_TRUE(layers[i]->params->zero_grads().ok());
      MoeLayerGradOutputs g;
      g.d_out = dx;
      g.d_p_out = dp;
      StatusOr<MoeLayerGradInputs> gi = layers[i]->layer->backward(g, saved[i]);
      EXPECT_TRUE(gi.ok()) << gi.status().to_string();
      Tensor d_in = Tensor::copy_of(gi->d_x_in);
      for (int64_t j = 0; j < d_in.numel(); ++j)
        d_in.data<double>()[j] += gi->d_x_base.data<double>()[j];
      dx = d_in;
      dp = gi->d_p_in;
      if (i == 1) {
        // Dense sublayer: p passes unchanged; dx through x + tanh(x)/2.
        for (int64_t j = 0; j < dx.numel(); ++j) {
          const double t = std::tanh(dense_in.data<double>()[j]);
          dx.data<double>()[j] *= 1.0 + 0.5 * (1 - t * t);
        }
      }
    }
    return dx;
  }
};

MoeLayerConfig momentum_config(double mu, double gamma, MomentumConvention conv) {
  MoeLayerConfig cfg = small_config();
  cfg.residual = ResidualKind::kHeavyBall;
  cfg.heavy_ball = {mu, gamma};
  cfg.convention = conv;
  return cfg;
}

TEST(MoeStackTest, MomentumWithZeroMuAndUnitGammaIsPlainBitForBit) {
  MoeLayerConfig plain_cfg = small_config();
  plain_cfg.capacity_factor = 0.8;  // some drops, to cover that path too
  MoeLayerConfig hb_cfg = momentum_config(0.0, 1.0, MomentumConvention::kPaper);
  hb_cfg.capacity_factor = 0.8;
  Stack plain(plain_cfg, 9), hb(hb_cfg, 9);
  std::vector<MoeLayerSaved> s1, s2;
  std::vector<Tensor> i1, i2, p1, p2;
  Tensor d1, d2;
  Tensor out_plain = plain.forward(&s1, &i1, &p1, &d1);
  Tensor out_hb = hb.forward(&s2, &i2, &p2, &d2);
  EXPECT_TRUE(bitwise_equal(out_plain, out_hb));
  Tensor dx_plain = plain.backward();
  Tensor dx_hb = hb.backward();
  EXPECT_TRUE(bitwise_equal(dx_plain, dx_hb));
  for (int i = 0; i < 3; ++i) {
    for (size_t j = 0; j < plain.layers[i]->params->all().size(); ++j) {
      const Parameter& a = *plain.layers[i]->params->all()[j];
      const Parameter& b = *hb.layers[i]->params->all()[j];
      EXPECT_TRUE(bitwise_equal(a.grad, b.grad)) << "layer " << i << " " << a.name;
    }
  }
}

// u_t(x) from a plain layer with the same parameters: out - x. Its routing decisions (experts
// [T, K]) go to *idx. The tests below compare a layer with this plain layer on inputs computed by
// hand in another order (cross-path equality, tests/testing/cross_path.h): decisions first, then
// values within kF64LayerTolerance.
Tensor smoe_output(LayerHarness* plain, const Tensor& x, Tensor* idx) {
  Tensor saved_x = Tensor::copy_of(plain->x);
  std::copy_n(x.data<double>(), x.numel(), plain->x.data<double>());
  plain->with_state = false;
  MoeLayerSaved s;
  Tensor out;
  plain->forward(&s, nullptr, &out);
  *idx = s.router.idx;
  std::copy_n(saved_x.data<double>(), x.numel(), plain->x.data<double>());
  for (int64_t i = 0; i < out.numel(); ++i) out.data<double>()[i] -= x.data<double>()[i];
  return out;
}

class RecurrenceTest : public ::testing::TestWithParam<MomentumConvention> {};

TEST_P(RecurrenceTest, ForwardMatchesHandRecurrenceAndBackwardMatchesDifferences) {
  const MomentumConvention conv = GetParam();
  const double mu = 0.7, gamma = 1.3;
  Stack stack(momentum_config(mu, gamma, conv), 8);
  std::vector<MoeLayerSaved> saved;
  std::vector<Tensor> inputs, p_inputs;
  Tensor dense_in;
  Tensor out = stack.forward(&saved, &inputs, &p_inputs, &dense_in);

  // By hand: p_t = u_t + mu p_{t-1}, x_{t+1} = x_t + gamma p_t (paper); the reference code
  // keeps m_t = mu m_{t-1} + gamma u_t and x_{t+1} = x_t - m_t.
  std::vector<std::unique_ptr<LayerHarness>> plain;
  for (int i = 0; i < 3; ++i)
    plain.push_back(std::make_unique<LayerHarness>(small_config(), 8, 500 + 17 * i));
  Tensor x = Tensor::copy_of(stack.x0);
  std::vector<double> p(x.numel(), 0.0);
  for (int i = 0; i < 3; ++i) {
    if (i == 1) {
      Tensor y = Tensor::empty(x.shape(), DType::kF64);
      Stack::dense(x, &y);
      x = std::move(y);
    }
    EXPECT_TRUE(
        values_within("input of layer " + std::to_string(i), x, inputs[i], kF64LayerTolerance));
    Tensor idx;
    Tensor u = smoe_output(plain[i].get(), x, &idx);
    EXPECT_TRUE(same_decisions("layer " + std::to_string(i), saved[i].router.idx, idx));
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double uj = u.data<double>()[j];
      if (conv == MomentumConvention::kPaper) {
        p[j] = uj + mu * p[j];
        x.data<double>()[j] += gamma * p[j];
      } else {
        p[j] = mu * p[j] + gamma * uj;
        x.data<double>()[j] -= p[j];
      }
    }
  }
  EXPECT_TRUE(values_within("output", x, out, kF64LayerTolerance));

  // Backward through the whole chain, including the momentum state (no detach).
  Tensor dx = stack.backward();
  std::vector<GradTarget> targets = {{"x0", stack.x0, dx}};
  for (int i = 0; i < 3; ++i) {
    for (GradTarget t : stack.layers[i]->param_targets()) {
      t.name = "layer" + std::to_string(i) + "." + t.name;
      targets.push_back(t);
    }
  }
  for (const auto& f : check_gradients([&]() { return stack.loss(); }, targets)) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(Conventions, RecurrenceTest,
                         ::testing::Values(MomentumConvention::kPaper,
                                           MomentumConvention::kReferenceCode));

TEST(RobustTest, DerivedCoefficientsAndShiftedInput) {
  MoeLayerConfig cfg = small_config();
  cfg.residual = ResidualKind::kRobust;
  cfg.robust = {0.5, 2.0, 1.0};  // k = 2
  ASSERT_TRUE(cfg.validate().ok());
  EXPECT_DOUBLE_EQ(cfg.robust.gamma(), 2 * 0.25 * 1.5 / 2);  // k (1-rho)^2 (1+rho) / L
  EXPECT_DOUBLE_EQ(cfg.robust.mu(), 2 * 0.125 / 1);          // k rho^3 / (k-1)
  EXPECT_DOUBLE_EQ(cfg.robust.alpha(), 0.125 / (1 * 0.25 * 1.5));

  LayerHarness robust(cfg, 6, 77);
  MoeLayerSaved saved;
  Tensor out, p_out;
  robust.forward(&saved, nullptr, &out, &p_out);
  // y = x + alpha gamma p; u = SMoE(y); p' = u + mu p; out = x + gamma p' (base x, not y).
  LayerHarness plain(small_config(), 6, 77);
  const double g = cfg.robust.gamma(), mu = cfg.robust.mu(), a = cfg.robust.alpha();
  Tensor y = Tensor::copy_of(robust.x);
  for (int64_t i = 0; i < y.numel(); ++i)
    y.data<double>()[i] += a * g * robust.p_in.data<double>()[i];
  Tensor idx;
  Tensor u = smoe_output(&plain, y, &idx);
  EXPECT_TRUE(same_decisions("robust vs plain on the shifted input", saved.router.idx, idx));
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double p = u.data<double>()[i] + mu * robust.p_in.data<double>()[i];
    EXPECT_NEAR(p_out.data<double>()[i], p, kF64LayerTolerance);
    EXPECT_NEAR(out.data<double>()[i], robust.x.data<double>()[i] + g * p, kF64LayerTolerance);
  }
}

// The reference code's convention keeps the buffer m = -gamma p, so the router and the experts
// see y = x - alpha m (spec/momentum-smoe.md 4); m' = mu m + gamma u(y); out = x - m'.
TEST(RobustTest, ReferenceCodeConventionShiftsByMinusAlphaM) {
  MoeLayerConfig cfg = small_config();
  cfg.residual = ResidualKind::kRobust;
  cfg.convention = MomentumConvention::kReferenceCode;
  cfg.robust = {0.5, 2.0, 1.0};  // k = 2: gamma 0.375, mu 0.25, alpha 1/3 (RobustTest above)
  ASSERT_TRUE(cfg.validate().ok());
  LayerHarness robust(cfg, 6, 78);
  MoeLayerSaved saved;
  Tensor out, m_out;
  robust.forward(&saved, nullptr, &out, &m_out);
  const double g = 2 * 0.25 * 1.5 / 2, mu = 2 * 0.125 / 1, a = 0.125 / (1 * 0.25 * 1.5);
  LayerHarness plain(small_config(), 6, 78);
  Tensor y = Tensor::copy_of(robust.x);
  for (int64_t i = 0; i < y.numel(); ++i) y.data<double>()[i] -= a * robust.p_in.data<double>()[i];
  Tensor idx;
  Tensor u = smoe_output(&plain, y, &idx);
  EXPECT_TRUE(
      same_decisions("robust (reference code) vs plain on x - alpha m", saved.router.idx, idx));
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double m = mu * robust.p_in.data<double>()[i] + g * u.data<double>()[i];
    EXPECT_NEAR(m_out.data<double>()[i], m, kF64LayerTolerance);
    EXPECT_NEAR(out.data<double>()[i], robust.x.data<double>()[i] - m, kF64LayerTolerance);
  }
}

// The paper's AdamSMoE (Sec. 3.1, spec/momentum-smoe.md 3) in the first MoE layer (zero moments):
// f = -u, p = (1 - beta1)(-f), v = (1 - beta2) f^2, out = (1 - kappa) x + gamma p / (sqrt(v) +
// eps), eps outside the sqrt; the heavy-ball state handed on is p = u + mu 0 = u.
TEST(AdamTest, PaperConventionByValue) {
  MoeLayerConfig cfg = small_config();
  cfg.residual = ResidualKind::kAdam;
  cfg.convention = MomentumConvention::kPaper;
  cfg.adam.eps_placement = AdamEpsPlacement::kOutsideSqrt;
  cfg.adam.kappa = 0.3;
  cfg.adam.gamma = 1.5;
  cfg.adam.eps = 1e-3;  // large enough to matter in the hand formula
  cfg.heavy_ball = {0.7, 1.0};
  ASSERT_TRUE(cfg.validate().ok());
  LayerHarness adam(cfg, 8, 6);
  adam.with_state = false;
  MoeLayerSaved saved;
  Tensor out, p_out;
  adam.forward(&saved, nullptr, &out, &p_out);
  LayerHarness plain(small_config(), 8, 6);
  Tensor idx;
  Tensor u = smoe_output(&plain, adam.x, &idx);
  EXPECT_TRUE(same_decisions("Adam (paper) vs plain", saved.router.idx, idx));
  for (int64_t i = 0; i < u.numel(); ++i) {
    const double ui = u.data<double>()[i], f = -ui;
    const double p = (1 - 0.9) * (-f), v = (1 - 0.999) * f * f;
    const double want = (1 - 0.3) * adam.x.data<double>()[i] + 1.5 * p / (std::sqrt(v) + 1e-3);
    EXPECT_NEAR(out.data<double>()[i], want, kF64LayerTolerance) << i;
    EXPECT_NEAR(p_out.data<double>()[i], ui, kF64LayerTolerance) << i;
  }
}

TEST(AdamTest, ReferenceCodeModeIsAScaledSignAndHandsOnGammaU) {
  MoeLayerConfig cfg = small_config();
  cfg.residual = ResidualKind::kAdam;
  cfg.convention = MomentumConvention::kReferenceCode;
  cfg.adam.eps_placement = AdamEpsPlacement::kInsideSqrt;
  cfg.adam.kappa = 1.0;
  cfg.heavy_ball = {0.7, 1.0};
  LayerHarness adam(cfg, 8, 5);
  adam.with_state = false;  // the first MoE layer: p = m = v = 0
  MoeLayerSaved saved;
  Tensor out, p_out;
  adam.forward(&saved, nullptr, &out, &p_out);
  LayerHarness plain(small_config(), 8, 5);
  Tensor idx;
  Tensor u = smoe_output(&plain, adam.x, &idx);
  EXPECT_TRUE(same_decisions("Adam vs plain", saved.router.idx, idx));
  // inner = h - gamma1 p1 / sqrt(v1 + eps), with kappa = 1 removing h: out = -(0.1 u) /
  // sqrt(0.001 u^2 + 1e-8) ~ -3.1623 sign(u) (spec/momentum-smoe.md 3.4).
  int checked = 0;
  for (int64_t i = 0; i < u.numel(); ++i) {
    const double ui = u.data<double>()[i];
    const double want = -0.1 * ui / std::sqrt(0.001 * ui * ui + 1e-8);
    EXPECT_NEAR(out.data<double>()[i], want, kF64LayerTolerance);
    if (std::fabs(ui) > 0.1) {
      EXPECT_NEAR(out.data<double>()[i], -std::sqrt(10.0) * (ui > 0 ? 1 : -1), 2e-3);
      ++checked;
    }
    EXPECT_NEAR(p_out.data<double>()[i], 1.0 * ui, kF64LayerTolerance);  // m = mu 0 + gamma2 u
  }
  EXPECT_GT(checked, 10);
}

TEST(CapacityLayerTest, DroplessEqualsACapacityThatDropsNothing) {
  MoeLayerConfig dropless = momentum_config(0.7, 1.0, MomentumConvention::kPaper);
  dropless.dropless = true;
  MoeLayerConfig big = dropless;
  big.dropless = false;
  big.capacity_factor = static_cast<double>(big.num_experts);  // C = T K >= any load
  LayerHarness a(dropless, 11, 8), b(big, 11, 8);
  MoeLayerSaved sa, sb;
  RouterStatsInfo sta, stb;
  Tensor oa, ob, pa, pb;
  a.forward(&sa, &sta, &oa, &pa);
  b.forward(&sb, &stb, &ob, &pb);
  EXPECT_TRUE(bitwise_equal(oa, ob));
  EXPECT_TRUE(bitwise_equal(pa, pb));
  EXPECT_EQ(sta.dropped_slots, 0);
  EXPECT_EQ(stb.dropped_slots, 0);
  EXPECT_LT(sa.plan.exchange.send_total, sb.plan.exchange.send_total);  // dropless sends no padding
  Tensor dxa, dxb, t1, t2, t3, t4, t5, t6, t7, t8;
  a.backward(&dxa, &t1, &t2, &t3, &t4);
  b.backward(&dxb, &t5, &t6, &t7, &t8);
  EXPECT_TRUE(bitwise_equal(dxa, dxb));
  for (size_t j = 0; j < a.params->all().size(); ++j) {
    EXPECT_TRUE(bitwise_equal(a.params->all()[j]->grad, b.params->all()[j]->grad))
        << a.params->all()[j]->name;
  }
}

TEST(CapacityLayerTest, OverflowTokensPassThroughTheResidualAndAreCounted) {
  // Route every token's first choice to expert 0 (huge bias), K = 1, 10 tokens, E = 4,
  // capacity factor 1: C = ceil(10 / 4) = 3, so tokens 3..9 are dropped and out = x for them.
  MoeLayerConfig cfg = small_config();
  cfg.top_k = 1;
  cfg.capacity_factor = 1.0;
  LayerHarness h(cfg, 10, 9);
  h.params->find("moe.b_router")->master.data<double>()[0] = 100.0;
  h.with_state = false;
  MoeLayerSaved saved;
  RouterStatsInfo stats;
  Tensor out;
  h.forward(&saved, &stats, &out);
  EXPECT_EQ(saved.plan.capacity, 3);
  EXPECT_EQ(stats.expert_load, (std::vector<int64_t>{10, 0, 0, 0}));
  EXPECT_EQ(stats.dropped_slots, 7);
  EXPECT_EQ(stats.fully_dropped_tokens, 7);
  for (int64_t t = 0; t < 10; ++t) {
    for (int64_t q = 0; q < cfg.d_model; ++q) {
      const double x = h.x.data<double>()[t * 4 + q], o = out.data<double>()[t * 4 + q];
      if (t < 3) {
        EXPECT_NE(o, x);
      } else {
        EXPECT_EQ(o, x) << "dropped token " << t;
      }
    }
  }
  stats.finalize();
  EXPECT_DOUBLE_EQ(stats.dropped_fraction, 0.7);
  EXPECT_DOUBLE_EQ(stats.max_load, 4.0);  // 10 / (10 / 4)
  EXPECT_EQ(stats.dead_experts, 3);
  // The balance loss counts the routing before capacity: f = (10/10, 0, 0, 0), and the bias
  // makes P_0 = 1 - O(e^-90), so E sum_e f_e P_e = 4 (with the loads after the drops, 1.2).
  EXPECT_NEAR(saved.aux.data<double>()[0], 4.0, 1e-12);
}

TEST(SparseMixerLayerTest, RouterGradientFollowsTheEstimatorRule) {
  for (auto rule : {SparseMixerGateGrad::kReferenceCode, SparseMixerGateGrad::kPaper}) {
    MoeLayerConfig cfg = small_config();
    cfg.top_k = 1;
    cfg.sparsemixer.enabled = true;
    cfg.sparsemixer.jitter = 0.6;
    cfg.sparsemixer.gate_grad = rule;
    cfg.balance_loss_coef = 0;
    cfg.z_loss_coef = 0;
    LayerHarness h(cfg, 12, 21);
    h.with_state = false;
    MoeLayerSaved saved;
    RouterStatsInfo stats;
    h.forward(&saved, &stats);
    EXPECT_GT(stats.non_argmax_tokens, 0) << "the test needs some non-argmax samples";
    Tensor dx, t1, t2, t3, t4;
    h.backward(&dx, &t1, &t2, &t3, &t4);
    // By hand: s_t = <dL/du_t, omega ⊙ y_D>, dL/dpi_D = 2 s (reference) or (1 + c) s (paper),
    // dtheta_j = dpi pi_D (1[j = D] - pi_j) Delta_j, dW = r^T dtheta.
    const RouterSaved& r = saved.router;
    const int64_t tokens = 12, experts = 4, d = 4;
    const double* omega = h.params->find("moe.omega")->master.data<double>();
    std::vector<double> dw(d * experts, 0.0);
    for (int64_t t = 0; t < tokens; ++t) {
      const int32_t row = saved.plan.row.data<int32_t>()[t];
      if (row < 0) continue;
      double s = 0;
      for (int64_t q = 0; q < d; ++q) {
        s +=
            h.w_out.data<double>()[t * d + q] * omega[q] * saved.y_send.data<double>()[row * d + q];
      }
      const double c = r.scale.data<double>()[t];
      const double dpi = rule == SparseMixerGateGrad::kReferenceCode ? 2 * s : (1 + c) * s;
      const int32_t chosen = r.idx.data<int32_t>()[t];
      const double pi_d = r.probs.data<double>()[t * experts + chosen];
      for (int64_t j = 0; j < experts; ++j) {
        if (!r.mask.data<uint8_t>()[t * experts + j]) continue;
        const double dtheta =
            dpi * pi_d * ((j == chosen) - r.probs.data<double>()[t * experts + j]);
        for (int64_t q = 0; q < d; ++q)
          dw[q * experts + j] += r.router_input.data<double>()[t * d + q] * dtheta;
      }
    }
    const double* got = h.params->find("moe.w_router")->grad.data<double>();
    for (int64_t i = 0; i < d * experts; ++i) EXPECT_NEAR(got[i], dw[i], 1e-12);
  }
}

TEST(MoeLayerTest, StatisticsAndDeterminism) {
  MoeLayerConfig cfg = momentum_config(0.7, 1.0, MomentumConvention::kPaper);
  cfg.expert_dropout = 0.2;
  cfg.output_dropout = 0.1;
  LayerHarness h(cfg, 16, 33);
  MoeLayerSaved s1, s2;
  RouterStatsInfo st;
  Tensor o1, o2;
  h.forward(&s1, &st, &o1);
  h.forward(&s2, nullptr, &o2);
  EXPECT_TRUE(bitwise_equal(o1, o2));
  int64_t total = 0;
  for (int64_t c : st.expert_load) total += c;
  EXPECT_EQ(total, 16 * 2);
  EXPECT_EQ(st.tokens, 16);
  EXPECT_GT(st.entropy_sum, 0.0);
  EXPECT_LE(st.entropy_sum, 16 * std::log(4.0) + 1e-9);
  EXPECT_GT(st.output_norm_sum, 0.0);
  EXPECT_GT(st.state_norm_sum, 0.0);
  // Another step draws other dropout masks.
  h.step += 1;
  MoeLayerSaved s3;
  Tensor o3;
  h.forward(&s3, nullptr, &o3);
  EXPECT_FALSE(bitwise_equal(o1, o3));
}

// The auxiliary losses against their definitions (spec sparsemixer-acmoe.md S3, S14), on a routing
// built by hand: balance = E sum_e f_e P_e with f_e = load_e / (T K) and P_e = mean_t p_te,
// z = mean_t logsumexp_t^2. W_router = I and b_router = 0 make each token's logits its input row,
// set to logs of small integers, so every softmax is a ratio of integers and the top-2 has no tie:
//   token 0: e^logits = (4, 2, 1, 1), sum 8 -> experts 0, 1
//   token 1:            (1, 2, 5, 1), sum 9 -> experts 2, 1
//   token 2:            (2, 1, 1, 5), sum 9 -> experts 3, 0
//   token 3:            (3, 1, 2, 1), sum 7 -> experts 0, 2
// loads (3, 2, 2, 1) of T K = 8 slots; P = (53/168, 61/336, 181/672, 157/672);
// balance = 4 (3 53/168 + 2 61/336 + 2 181/672 + 157/672) / 8 = 1399/1344;
// z = (ln^2 8 + 2 ln^2 9 + ln^2 7) / 4.
TEST(MoeLayerTest, AuxLossesMatchTheirDefinitionsOnAHandBuiltRouting) {
  const MoeLayerConfig cfg = small_config();  // E = D = 4, K = 2; weights 0.05 and 0.01
  LayerHarness h(cfg, 4, 41);
  h.with_state = false;
  double* w = h.params->find("moe.w_router")->master.data<double>();  // [D, E]
  double* b = h.params->find("moe.b_router")->master.data<double>();
  const double e_logits[4][4] = {{4, 2, 1, 1}, {1, 2, 5, 1}, {2, 1, 1, 5}, {3, 1, 2, 1}};
  for (int64_t q = 0; q < 4; ++q) {
    b[q] = 0.0;
    for (int64_t e = 0; e < 4; ++e) w[q * 4 + e] = q == e ? 1.0 : 0.0;
    for (int64_t e = 0; e < 4; ++e) h.x.data<double>()[q * 4 + e] = std::log(e_logits[q][e]);
  }
  MoeLayerSaved saved;
  RouterStatsInfo stats;
  h.forward(&saved, &stats);
  // The premise: the routing is the one above.
  EXPECT_EQ(to_vector<int32_t>(saved.router.idx), (std::vector<int32_t>{0, 1, 2, 1, 3, 0, 0, 2}));
  EXPECT_EQ(stats.expert_load, (std::vector<int64_t>{3, 2, 2, 1}));
  const double balance = 1399.0 / 1344.0;
  const double l7 = std::log(7.0), l8 = std::log(8.0), l9 = std::log(9.0);
  const double z = (l8 * l8 + 2 * l9 * l9 + l7 * l7) / 4;
  // Only exp/log rounding separates them (9e-16 at most here, on z); 1e-13 leaves room for other
  // math libraries and is far below any error in a formula.
  const double tol = 1e-13;
  EXPECT_NEAR(saved.aux.data<double>()[0], balance, tol);
  EXPECT_NEAR(saved.aux.data<double>()[1], z, tol);
  EXPECT_NEAR(aux_loss(saved), 0.05 * balance + 0.01 * z, tol);
  // The statistics report them as sums over the T = 4 tokens.
  EXPECT_NEAR(stats.balance_loss_sum, 4 * balance, 4 * tol);
  EXPECT_NEAR(stats.z_loss_sum, 4 * z, 4 * tol);
}

// The experts by hand, SwiGLU with and without biases: u_t = sum_k gate_tk FFN_e(x_t) with
// FFN_e(x) = (silu(x W_gate + b_gate) * (x W_up + b_up)) W2_e + b2_e, where w1_e = [W_gate | W_up]
// is [D, 2F] (b1_e = [b_gate | b_up]) and silu(a) = a / (1 + e^-a) (transformers'
// MixtralBlockSparseTop2MLP). Plain residual, no drops, evaluation (no dropout): out = x + u.
TEST(MoeLayerTest, SwigluExpertsMatchAHandComputationWithAndWithoutBiases) {
  for (bool bias : {true, false}) {
    MoeLayerConfig cfg = small_config();
    cfg.activation = ExpertActivation::kSwiglu;
    cfg.linear_bias = bias;
    ASSERT_TRUE(cfg.validate().ok());
    LayerHarness h(cfg, 6, 13);
    h.with_state = false;
    h.training = false;
    const int64_t d = cfg.d_model, f = cfg.d_expert, k = cfg.top_k;
    const Parameter* w1 = h.params->find("moe.w1");
    const Parameter* w2 = h.params->find("moe.w2");
    const Parameter* b1 = h.params->find("moe.b1");
    const Parameter* b2 = h.params->find("moe.b2");
    ASSERT_NE(w1, nullptr);
    ASSERT_NE(w2, nullptr);
    EXPECT_EQ(w1->shape, (Shape{cfg.num_experts, d, 2 * f}));
    EXPECT_EQ(w2->shape, (Shape{cfg.num_experts, f, d}));
    ASSERT_EQ(b1 != nullptr, bias);
    ASSERT_EQ(b2 != nullptr, bias);
    if (bias) {
      EXPECT_EQ(b1->shape, (Shape{cfg.num_experts, 2 * f}));
    }
    MoeLayerSaved saved;
    Tensor out;
    h.forward(&saved, nullptr, &out);
    for (int64_t t = 0; t < h.tokens; ++t) {
      const double* x = h.x.data<double>() + t * d;
      std::vector<double> u(d, 0.0);
      for (int64_t c = 0; c < k; ++c) {
        const int64_t e = saved.router.idx.data<int32_t>()[t * k + c];
        const double gate = saved.router.gate.data<double>()[t * k + c];
        const double* w1e = w1->master.data<double>() + e * d * 2 * f;
        const double* w2e = w2->master.data<double>() + e * f * d;
        for (int64_t j = 0; j < f; ++j) {
          double g = bias ? b1->master.data<double>()[e * 2 * f + j] : 0.0;
          double up = bias ? b1->master.data<double>()[e * 2 * f + f + j] : 0.0;
          for (int64_t q = 0; q < d; ++q) {
            g += x[q] * w1e[q * 2 * f + j];
            up += x[q] * w1e[q * 2 * f + f + j];
          }
          const double hj = g / (1 + std::exp(-g)) * up;
          for (int64_t q = 0; q < d; ++q) u[q] += gate * hj * w2e[j * d + q];
        }
        for (int64_t q = 0; bias && q < d; ++q) {
          u[q] += gate * b2->master.data<double>()[e * d + q];
        }
      }
      for (int64_t q = 0; q < d; ++q) {
        EXPECT_NEAR(out.data<double>()[t * d + q], x[q] + u[q], kF64LayerTolerance)
            << (bias ? "with" : "without") << " biases, token " << t << ", column " << q;
      }
    }
  }
}

// DeepSeek-V3's routing against its definitions, by a plain computation: sigmoid scores
// s = sigmoid(logits), the top-2 of s, gates 2.5 s_j / (s_j0 + s_j1); the balance losses read
// s' = s / sum_e s; the sequence-wise loss over two sequences of 2 tokens is the mean of
// sum_e f_e P_e with f_e = E n_e / (K S) and P_e = mean over the sequence of s'_e. The router has
// no bias (linear_bias false): no b_router parameter, and with W_router = I the logits are the
// input rows (the hand routing of the test above, whose logits are logs of small integers).
TEST(MoeLayerTest, SigmoidGatesAndSequenceLossMatchTheirDefinitionsWithoutRouterBias) {
  MoeLayerConfig cfg = small_config();  // E = D = 4, K = 2; balance 0.05, z 0.01
  cfg.linear_bias = false;
  cfg.score_function = ScoreFunction::kSigmoid;
  cfg.routed_scaling = 2.5;
  cfg.seq_balance_loss_coef = 0.3;
  LayerHarness h(cfg, 4, 41);
  h.with_state = false;
  h.seq_len = 2;
  ASSERT_EQ(h.params->find("moe.b_router"), nullptr);
  double* w = h.params->find("moe.w_router")->master.data<double>();  // [D, E]
  const double a[4][4] = {{4, 2, 1, 1}, {1, 2, 5, 1}, {2, 1, 1, 5}, {3, 1, 2, 1}};
  double s[4][4], sp[4][4];
  for (int64_t t = 0; t < 4; ++t) {
    double sum = 0;
    for (int64_t e = 0; e < 4; ++e) {
      w[t * 4 + e] = t == e ? 1.0 : 0.0;
      h.x.data<double>()[t * 4 + e] = std::log(a[t][e]);
      s[t][e] = a[t][e] / (1 + a[t][e]);  // sigmoid(log a)
      sum += s[t][e];
    }
    for (int64_t e = 0; e < 4; ++e) sp[t][e] = s[t][e] / sum;
  }
  MoeLayerSaved saved;
  RouterStatsInfo stats;
  h.forward(&saved, &stats);
  const std::vector<int32_t> idx = {0, 1, 2, 1, 3, 0, 0, 2};
  ASSERT_EQ(to_vector<int32_t>(saved.router.idx), idx);
  const double tol = 1e-13;  // exp/log rounding only (see the test above)
  for (int64_t t = 0; t < 4; ++t) {
    const double chosen = s[t][idx[2 * t]] + s[t][idx[2 * t + 1]];
    for (int64_t j = 0; j < 2; ++j) {
      EXPECT_NEAR(saved.router.gate.data<double>()[2 * t + j], 2.5 * s[t][idx[2 * t + j]] / chosen,
                  tol);
    }
  }
  double balance = 0, seq = 0;
  const int64_t load[4] = {3, 2, 2, 1};
  for (int64_t e = 0; e < 4; ++e) {
    double p = 0;
    for (int64_t t = 0; t < 4; ++t) p += sp[t][e] / 4;
    balance += 4 * (load[e] / 8.0) * p;
  }
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t e = 0; e < 4; ++e) {
      double n = 0, p = 0;
      for (int64_t t = 2 * b; t < 2 * b + 2; ++t) {
        n += (idx[2 * t] == e) + (idx[2 * t + 1] == e);
        p += sp[t][e] / 2;
      }
      seq += 4.0 * n / (2 * 2) * p / 2;  // f_e P_e, averaged over the 2 sequences
    }
  }
  EXPECT_NEAR(saved.aux.data<double>()[0], balance, tol);
  EXPECT_NEAR(saved.aux.data<double>()[3], seq, tol);
  EXPECT_NEAR(aux_loss(saved), 0.05 * balance + 0.01 * saved.aux.data<double>()[1] + 0.3 * seq,
              tol);
  EXPECT_NEAR(stats.seq_balance_loss_sum, 4 * seq, 4 * tol);
  // Without the sequence length the loss cannot be computed: an error, not a silent zero.
  h.seq_len = 0;
  MoeLayerInputs in;
  in.x_in = h.x;
  in.x_base = h.x;
  MoeLayerSaved unused;
  const Status missing = h.layer->forward(in, &unused).status();
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.message().find("sequence length"), std::string::npos) << missing.message();
}

// Node-limited routing in the layer: the router's logits are the token itself (an identity
// router), the case of router_test's NodeLimitedScoresAGroupByItsBestKOverM: three groups of
// four, two kept, top-6. Group-limited routing keeps groups 0 and 1 (top-2 sums), node-limited
// (ceil(6 / 2) = 3 best) groups 1 and 2.
TEST(MoeLayerTest, NodeLimitedRoutingKeepsGroupsByTheirBestKOverM) {
  MoeLayerConfig cfg = small_config();
  cfg.d_model = cfg.num_experts = 12;
  cfg.top_k = 6;
  cfg.linear_bias = false;
  cfg.score_function = ScoreFunction::kSigmoid;
  cfg.expert_groups = 3;
  const double logits[12] = {3, 3, -4, -4, 2, 2, 2, -4, 1, 1, 1, 1};
  const auto route = [&](const MoeLayerConfig& c) {
    LayerHarness h(c, 1, 43);
    h.with_state = false;
    double* w = h.params->find("moe.w_router")->master.data<double>();  // [D, E]
    for (int64_t q = 0; q < 12; ++q) {
      for (int64_t e = 0; e < 12; ++e) w[q * 12 + e] = q == e ? 1.0 : 0.0;
      h.x.data<double>()[q] = logits[q];
    }
    MoeLayerSaved saved;
    h.forward(&saved);
    return to_vector<int32_t>(saved.router.idx);
  };
  MoeLayerConfig grouped = cfg;
  grouped.topk_groups = 2;
  EXPECT_EQ(route(grouped), (std::vector<int32_t>{0, 1, 4, 5, 6, 2}));
  MoeLayerConfig node = cfg;
  node.max_ep_ranks = 2;
  EXPECT_EQ(route(node), (std::vector<int32_t>{4, 5, 6, 8, 9, 10}));
}

TEST(MoeLayerTest, EvaluationModeIsDeterministicAndSkipsDropout) {
  MoeLayerConfig cfg = small_config();
  cfg.expert_dropout = 0.5;
  cfg.output_dropout = 0.5;
  LayerHarness a(cfg, 8, 3), b(small_config(), 8, 3);
  a.training = false;
  b.training = false;
  MoeLayerSaved sa, sb;
  Tensor oa, ob;
  a.forward(&sa, nullptr, &oa);
  b.forward(&sb, nullptr, &ob);
  EXPECT_TRUE(bitwise_equal(oa, ob));
}

TEST(MoeLayerTest, RejectsMismatchedShapes) {
  LayerHarness h(small_config(), 4, 1);
  Tensor x = Tensor::zeros({4, 3}, DType::kF64);
  MoeLayerInputs in;
  in.x_in = x;
  in.x_base = x;
  MoeLayerSaved saved;
  Status s = h.layer->forward(in, &saved).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[T, 4]"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace moe::testing
