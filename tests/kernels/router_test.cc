// Routing kernels against hand-computed cases: top-k ties and the softmax over the selected
// logits, sigmoid scores, unnormalised and scaled gates and the selection bias, the per-sequence
// counts and DeepSeek-V3's sequence-wise loss, capacity slot order and drops, SparseMixer's masks,
// sampling and gate-gradient rules, the balance and z losses, and the AC metric's normalisations.
#include "kernels/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/chunked_sum.h"
#include "tests/testing/gradient_check.h"

namespace moe::kernels {
namespace {

using moe::testing::check_gradients;
using moe::testing::fill_uniform;

Context& ctx() { return testing::host_context(); }

// balance, z (unweighted) from probs, lse and a per-expert load over `tokens` tokens, through the
// packed device sums.
struct Aux {
  double balance, z;
};
Aux aux_of(const TensorView& packed, int64_t k) {
  Tensor losses = Tensor::zeros({kAuxLossesSize}, DType::kF64);
  EXPECT_TRUE(aux_losses(ctx(), packed, {k}, losses).ok());
  return {losses.data<double>()[0], losses.data<double>()[1]};
}
Tensor packed_sums(const Tensor& probs, const Tensor& lse, const std::vector<int64_t>& load,
                   const TensorView& seq_counts = {}) {
  Tensor packed = Tensor::empty({aux_packed_size(probs.dim(1))}, DType::kF64);
  Tensor l = Tensor::from_vector<int64_t>({static_cast<int64_t>(load.size())}, load);
  EXPECT_TRUE(aux_sums(ctx(), probs, lse, l, seq_counts, probs.dim(0), packed).ok());
  return packed;
}

TEST(TopkSoftmaxTest, HandComputedWithTies) {
  // Token 0: logits 1, 3, 3, 0 -> top-2 = experts 1, 2 (tie broken by index), gates 1/2, 1/2.
  // Token 1: logits 2, -1, 0.5, 4 -> top-2 = 3, 0; gates softmax(4, 2).
  Tensor logits = Tensor::from_vector<double>({2, 4}, {1, 3, 3, 0, 2, -1, 0.5, 4});
  Tensor idx = Tensor::empty({2, 2}, DType::kI32);
  Tensor gate = Tensor::empty({2, 2}, DType::kF64);
  Tensor probs = Tensor::empty({2, 4}, DType::kF64);
  Tensor lse = Tensor::empty({2}, DType::kF64);
  ASSERT_TRUE(topk_softmax(ctx(), logits, idx, gate, probs, lse).ok());
  EXPECT_EQ(to_vector<int32_t>(idx), (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_DOUBLE_EQ(gate.data<double>()[0], 0.5);
  const double g = 1.0 / (1.0 + std::exp(-2.0));
  EXPECT_NEAR(gate.data<double>()[2], g, 1e-15);
  EXPECT_NEAR(gate.data<double>()[3], 1 - g, 1e-15);
  const double z0 = std::exp(1) + 2 * std::exp(3) + 1;
  EXPECT_NEAR(lse.data<double>()[0], std::log(z0), 1e-14);
  EXPECT_NEAR(probs.data<double>()[1], std::exp(3) / z0, 1e-15);
}

TEST(TopkSoftmaxTest, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 5, experts = 6, k = 3;
  Tensor logits = Tensor::empty({tokens, experts}, DType::kF64);
  fill_uniform(logits, 1, -2, 2);
  Tensor w = Tensor::empty({tokens, k}, DType::kF64);
  fill_uniform(w, 2);
  Tensor idx = Tensor::empty({tokens, k}, DType::kI32);
  Tensor gate = Tensor::empty({tokens, k}, DType::kF64);
  Tensor probs = Tensor::empty({tokens, experts}, DType::kF64);
  Tensor lse = Tensor::empty({tokens}, DType::kF64);
  auto loss = [&]() {
    EXPECT_TRUE(topk_softmax(ctx(), logits, idx, gate, probs, lse).ok());
    return moe::testing::dot(gate, w);
  };
  loss();
  Tensor d_logits = Tensor::zeros({tokens, experts}, DType::kF64);
  ASSERT_TRUE(topk_softmax_backward(ctx(), w, gate, idx, d_logits).ok());
  for (const auto& f : check_gradients(loss, {{"logits", logits, d_logits}})) ADD_FAILURE() << f;
}

// The routing outputs of T tokens over E experts with top-K, f64.
struct RouteOut {
  Tensor idx, gate, probs, lse;
  RouteOut(int64_t tokens, int64_t experts, int64_t k)
      : idx(Tensor::empty({tokens, k}, DType::kI32)),
        gate(Tensor::empty({tokens, k}, DType::kF64)),
        probs(Tensor::empty({tokens, experts}, DType::kF64)),
        lse(Tensor::empty({tokens}, DType::kF64)) {}
  Status route(const RouteOptions& opt, const Tensor& logits) {
    return topk_route(ctx(), opt, logits, idx, gate, probs, lse);
  }
};

RouteOptions sigmoid_options(bool renormalize, double scaling) {
  RouteOptions opt;
  opt.score = ScoreFunction::kSigmoid;
  opt.renormalize = renormalize;
  opt.scaling = scaling;
  return opt;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// DeepSeek-V3's gate by hand: logits (0, 1, -1, 2), K = 2 -> s = sigmoid(logits), the top-2 are
// experts 3 and 1; renormalised gates s_j / (s_3 + s_1), else s_j; both times the scaling; probs
// are s / sum_e s; lse is still the logits' logsumexp.
TEST(TopkRouteTest, SigmoidGatesByHand) {
  Tensor logits = Tensor::from_vector<double>({1, 4}, {0, 1, -1, 2});
  const double s[4] = {0.5, sigmoid(1), sigmoid(-1), sigmoid(2)};
  const double all = s[0] + s[1] + s[2] + s[3];
  RouteOut out(1, 4, 2);
  for (bool renormalize : {true, false}) {
    for (double scaling : {1.0, 2.5}) {
      ASSERT_TRUE(out.route(sigmoid_options(renormalize, scaling), logits).ok());
      EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{3, 1}));
      const double denom = renormalize ? s[3] + s[1] : 1.0;
      EXPECT_NEAR(out.gate.data<double>()[0], scaling * s[3] / denom, 1e-15);
      EXPECT_NEAR(out.gate.data<double>()[1], scaling * s[1] / denom, 1e-15);
      for (int e = 0; e < 4; ++e) EXPECT_NEAR(out.probs.data<double>()[e], s[e] / all, 1e-15);
      EXPECT_NEAR(out.lse.data<double>()[0], std::log(1 + std::exp(1) + std::exp(-1) + std::exp(2)),
                  1e-14);
    }
  }
  // Ties go to the lower index, as for softmax.
  Tensor tied = Tensor::from_vector<double>({1, 4}, {0.5, 1, 1, 1});
  ASSERT_TRUE(out.route(sigmoid_options(true, 1.0), tied).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{1, 2}));
  EXPECT_DOUBLE_EQ(out.gate.data<double>()[0], 0.5);
}

// Softmax without renormalisation: the gates are the full-softmax probabilities of the chosen
// experts, times the scaling; with it and a scaling, the default gates times the scaling.
TEST(TopkRouteTest, SoftmaxUnnormalisedAndScaledByHand) {
  Tensor logits = Tensor::from_vector<double>({1, 4}, {0, 1, -1, 2});
  const double z = 1 + std::exp(1) + std::exp(-1) + std::exp(2);
  RouteOut out(1, 4, 2);
  RouteOptions opt;
  opt.renormalize = false;
  opt.scaling = 3.0;
  ASSERT_TRUE(out.route(opt, logits).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{3, 1}));
  EXPECT_NEAR(out.gate.data<double>()[0], 3.0 * std::exp(2) / z, 1e-15);
  EXPECT_NEAR(out.gate.data<double>()[1], 3.0 * std::exp(1) / z, 1e-15);
  opt.renormalize = true;
  ASSERT_TRUE(out.route(opt, logits).ok());
  EXPECT_NEAR(out.gate.data<double>()[0], 3.0 * std::exp(2) / (std::exp(2) + std::exp(1)), 1e-15);
  EXPECT_NEAR(out.probs.data<double>()[1], std::exp(1) / z, 1e-15);
  // The default options are topk_softmax, bit for bit.
  RouteOut plain(1, 4, 2);
  ASSERT_TRUE(topk_softmax(ctx(), logits, plain.idx, plain.gate, plain.probs, plain.lse).ok());
  ASSERT_TRUE(out.route(RouteOptions(), logits).ok());
  EXPECT_TRUE(moe::testing::bitwise_equal(out.gate, plain.gate));
  EXPECT_TRUE(moe::testing::bitwise_equal(out.probs, plain.probs));
}

// The selection bias moves the choice, never the gates: sigmoid keys s + b; softmax keys p + b.
// A zero bias selects as no bias does.
TEST(TopkRouteTest, SelectionBiasChangesTheChoiceOnly) {
  Tensor logits = Tensor::from_vector<double>({1, 4}, {0, 1, -1, 2});
  const double s1 = sigmoid(1), s2 = sigmoid(-1), s3 = sigmoid(2);
  RouteOut out(1, 4, 2);
  RouteOptions opt = sigmoid_options(true, 1.0);
  Tensor bias = Tensor::from_vector<double>({4}, {0, 0, 0.7, 0});  // keys .5, .73, .97, .88
  opt.selection_bias = bias;
  ASSERT_TRUE(out.route(opt, logits).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(out.gate.data<double>()[0], s2 / (s2 + s3), 1e-15);
  EXPECT_NEAR(out.gate.data<double>()[1], s3 / (s2 + s3), 1e-15);
  Tensor zero = Tensor::zeros({4}, DType::kF64);
  opt.selection_bias = zero;
  ASSERT_TRUE(out.route(opt, logits).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{3, 1}));
  EXPECT_NEAR(out.gate.data<double>()[1], s1 / (s1 + s3), 1e-15);
  // Softmax: p = (.087, .237, .032, .644); keys p + (0.5, 0, 0, 0) rank experts 3 then 0; the
  // gates are the softmax over the chosen logits (2, 0).
  RouteOptions soft;
  Tensor soft_bias = Tensor::from_vector<double>({4}, {0.5, 0, 0, 0});
  soft.selection_bias = soft_bias;
  ASSERT_TRUE(out.route(soft, logits).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{3, 0}));
  EXPECT_NEAR(out.gate.data<double>()[0], std::exp(2) / (std::exp(2) + 1), 1e-15);
  EXPECT_NEAR(out.gate.data<double>()[1], 1 / (std::exp(2) + 1), 1e-15);
}

// Group-limited routing by hand: 8 experts in 4 groups of 2; a token keeps the 2 groups whose two
// best keys sum highest, then its top-2 inside them. Logits (3, -3 | 1, 1 | 0.5, 0.5 | 2, -4):
// with sigmoid scores the groups' sums are .95+.05 = 1.0, .73+.73 = 1.46, .62+.62 = 1.24 and
// .88+.02 = .90, so groups 1 and 2 are kept and expert 0 (the largest score) is not chosen: the
// choice is 2, 3 (equal keys: the lower index first). A bias on expert 7 (+0.5) lifts group 3
// over group 2. Keeping every group gives the plain top-2 (0, 6). Softmax ranks groups by the sums
// of their probabilities, which the largest logit dominates: (e^3 + e^-3) / Z, e^2 / Z, ... keep
// groups 0 and 3, and logits (1, 1 | 1, 1 | 3, 0 | 0, 0) keep groups 2 and, of the tied groups 0
// and 1, the lower one: experts 4 then 0.
TEST(TopkRouteTest, GroupLimitedChoosesInsideTheBestGroups) {
  Tensor logits = Tensor::from_vector<double>({1, 8}, {3, -3, 1, 1, 0.5, 0.5, 2, -4});
  RouteOut out(1, 8, 2);
  RouteOptions opt = sigmoid_options(true, 1.0);
  opt.groups = 4;
  opt.topk_groups = 2;
  ASSERT_TRUE(out.route(opt, logits).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(out.gate.data<double>()[0], 0.5, 1e-15);  // equal scores, renormalised
  Tensor bias = Tensor::from_vector<double>({8}, {0, 0, 0, 0, 0, 0, 0, 0.5});
  opt.selection_bias = bias;  // group 3: .88 + (.02 + .5) = 1.40 > group 2's 1.24
  ASSERT_TRUE(out.route(opt, logits).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{6, 2}));
  opt.selection_bias = TensorView();
  opt.topk_groups = 4;  // every group: no limit
  ASSERT_TRUE(out.route(opt, logits).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{0, 6}));
  RouteOptions soft;
  soft.groups = 4;
  soft.topk_groups = 2;
  ASSERT_TRUE(out.route(soft, logits).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{0, 6}));
  ASSERT_TRUE(out.route(soft, Tensor::from_vector<double>({1, 8}, {1, 1, 1, 1, 3, 0, 0, 0})).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{4, 0}));
  // The kept groups must hold top_k experts, and the groups must divide E.
  soft.topk_groups = 1;
  RouteOut three(1, 8, 3);
  EXPECT_EQ(three.route(soft, logits).code(), StatusCode::kInvalidArgument);
  soft.groups = 3;
  EXPECT_EQ(out.route(soft, logits).code(), StatusCode::kInvalidArgument);
}

// Node-limited routing scores a group by its ceil(K / M) best scores: three groups of four, keep
// M = 2 for top-6. Sigmoid top-2 sums are 1.905 (group 0), 1.762, 1.462; top-3 sums are 1.923,
// 2.642, 2.193: group 0 is kept by the top-2 rule and dropped by the top-3 one.
TEST(TopkRouteTest, NodeLimitedScoresAGroupByItsBestKOverM) {
  Tensor logits = Tensor::from_vector<double>({1, 12}, {3, 3, -4, -4, 2, 2, 2, -4, 1, 1, 1, 1});
  RouteOut out(1, 12, 6);
  RouteOptions opt = sigmoid_options(true, 1.0);
  opt.groups = 3;
  opt.topk_groups = 2;
  ASSERT_TRUE(out.route(opt, logits).ok());  // group_top 2: groups 0 and 1
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{0, 1, 4, 5, 6, 2}));
  opt.group_top = 3;
  ASSERT_TRUE(out.route(opt, logits).ok());  // groups 1 and 2
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{4, 5, 6, 8, 9, 10}));
  opt.group_top = 9;  // more than a group holds: all its scores (1.94, 2.66, 2.92)
  ASSERT_TRUE(out.route(opt, logits).ok());
  EXPECT_EQ(to_vector<int32_t>(out.idx), (std::vector<int32_t>{4, 5, 6, 8, 9, 10}));
  opt.group_top = 0;
  EXPECT_EQ(out.route(opt, logits).code(), StatusCode::kInvalidArgument);
}

// Every score function, with and without renormalisation, scaled and not, with a selection bias
// (a constant of the selection, no gradient), against finite differences.
TEST(TopkRouteTest, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 6, experts = 7, k = 3;
  for (ScoreFunction score : {ScoreFunction::kSoftmax, ScoreFunction::kSigmoid}) {
    for (bool renormalize : {true, false}) {
      for (double scaling : {1.0, 2.5}) {
        for (bool with_bias : {false, true}) {
          Tensor logits = Tensor::empty({tokens, experts}, DType::kF64);
          fill_uniform(logits, 11, -2, 2);
          Tensor bias = Tensor::empty({experts}, DType::kF64);
          fill_uniform(bias, 12, -0.3, 0.3);
          Tensor w = Tensor::empty({tokens, k}, DType::kF64);
          fill_uniform(w, 13);
          RouteOptions opt;
          opt.score = score;
          opt.renormalize = renormalize;
          opt.scaling = scaling;
          if (with_bias) opt.selection_bias = bias;
          RouteOut out(tokens, experts, k);
          auto loss = [&]() {
            EXPECT_TRUE(out.route(opt, logits).ok());
            return moe::testing::dot(out.gate, w);
          };
          loss();
          Tensor d_logits = Tensor::zeros({tokens, experts}, DType::kF64);
          ASSERT_TRUE(topk_route_backward(ctx(), opt, logits, w, out.gate, out.idx, d_logits).ok());
          const std::string what = str_cat(score == ScoreFunction::kSigmoid ? "sigmoid" : "softmax",
                                           renormalize ? " renormalised" : "", " scaling ", scaling,
                                           with_bias ? " biased" : "");
          for (const auto& f : check_gradients(loss, {{"logits", logits, d_logits}})) {
            ADD_FAILURE() << what << ": " << f;
          }
        }
      }
    }
  }
}

TEST(TopkRouteTest, ArgumentErrors) {
  Tensor logits = Tensor::zeros({2, 4}, DType::kF64);
  RouteOut out(2, 4, 2);
  RouteOptions opt;
  opt.scaling = 0;
  EXPECT_EQ(out.route(opt, logits).code(), StatusCode::kInvalidArgument);
  opt.scaling = 1;
  Tensor short_bias = Tensor::zeros({3}, DType::kF64);
  opt.selection_bias = short_bias;
  EXPECT_EQ(out.route(opt, logits).code(), StatusCode::kInvalidArgument);
  Tensor f32_bias = Tensor::zeros({4}, DType::kF32);
  opt.selection_bias = f32_bias;
  EXPECT_EQ(out.route(opt, logits).code(), StatusCode::kInvalidArgument);
  // Sigmoid (and unnormalised softmax) gradients need the logits.
  Tensor d = Tensor::zeros({2, 4}, DType::kF64);
  EXPECT_EQ(topk_route_backward(ctx(), sigmoid_options(true, 1.0), TensorView(), out.gate, out.gate,
                                out.idx, d)
                .code(),
            StatusCode::kInvalidArgument);
}

struct SmOut {
  Tensor idx, gate, probs, lse, mask, scale, is_argmax;
  explicit SmOut(int64_t tokens, int64_t experts)
      : idx(Tensor::empty({tokens, 1}, DType::kI32)),
        gate(Tensor::empty({tokens, 1}, DType::kF64)),
        probs(Tensor::empty({tokens, experts}, DType::kF64)),
        lse(Tensor::empty({tokens}, DType::kF64)),
        mask(Tensor::empty({tokens, experts}, DType::kU8)),
        scale(Tensor::empty({tokens}, DType::kF64)),
        is_argmax(Tensor::empty({tokens}, DType::kU8)) {}
  Status route(const SparseMixerRouteArgs& a, const Tensor& logits) {
    return sparsemixer_route(ctx(), a, logits, {idx, gate, probs, lse, mask, scale, is_argmax});
  }
};

TEST(SparseMixerTest, PaperAndReferenceMasks) {
  // theta* = 2, r = 0.1. Paper: keep i iff 2 - th <= 0.1 (2 + |th|).
  //   th = 1.7: 0.3 <= 0.37 keep; th = 1.6: 0.4 <= 0.36 drop; th = -2: drop.
  // Reference code: keep iff 2 - th <= 0.2 max(|th|, 2) = 0.4: 1.7 keep, 1.6 keep, -2 drop.
  Tensor logits = Tensor::from_vector<double>({1, 4}, {1.7, 2.0, 1.6, -2.0});
  SparseMixerRouteArgs args;
  args.training = false;
  args.params.jitter = 0.1;
  SmOut out(1, 4);
  ASSERT_TRUE(out.route(args, logits).ok());
  EXPECT_EQ(to_vector<uint8_t>(out.mask), (std::vector<uint8_t>{1, 1, 0, 0}));
  EXPECT_EQ(out.idx.data<int32_t>()[0], 1);  // inference: argmax, full scale
  EXPECT_EQ(out.scale.data<double>()[0], 1.0);
  const double pi = std::exp(2.0) / (std::exp(2.0) + std::exp(1.7));
  EXPECT_NEAR(out.gate.data<double>()[0], pi, 1e-15);
  EXPECT_NEAR(out.lse.data<double>()[0],
              std::log(std::exp(1.7) + std::exp(2.0) + std::exp(1.6) + std::exp(-2.0)), 1e-14);
  args.params.mask = SparseMixerMask::kReferenceCode;
  ASSERT_TRUE(out.route(args, logits).ok());
  EXPECT_EQ(to_vector<uint8_t>(out.mask), (std::vector<uint8_t>{1, 1, 1, 0}));
  // All-zero logits: the reference code's 0/0 keeps the expert (no division here).
  Tensor zeros = Tensor::zeros({1, 4}, DType::kF64);
  ASSERT_TRUE(out.route(args, zeros).ok());
  EXPECT_EQ(to_vector<uint8_t>(out.mask), (std::vector<uint8_t>{1, 1, 1, 1}));
}

// Logits (1.7, 2.0, 1.5) with r = 0.1: the paper mask keeps 1.7 (0.3 <= 0.1 (2 + 1.7) = 0.37)
// and drops 1.5 (0.5 > 0.35), the reference code's too (0.5 > 0.2 max(1.5, 2) = 0.4), so
// pi_0 = e^1.7 / (e^1.7 + e^2) = 0.4256. The dropped expert is close enough to matter: a
// normaliser that includes it gives e^1.7 / (e^1.7 + e^2 + e^1.5) = 0.3156, and so does sampling
// from the full softmax with a masked draw replaced by the argmax.
TEST(SparseMixerTest, SamplesFromTheMaskedSoftmaxAndHalvesNonArgmax) {
  const int64_t tokens = 40000, experts = 3;
  const double l[3] = {1.7, 2.0, 1.5};
  Tensor logits = Tensor::empty({tokens, experts}, DType::kF64);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < experts; ++e) logits.data<double>()[t * 3 + e] = l[e];
  }
  // The expected values, from the logits alone (not from the kernel's probs).
  const double unmasked = std::exp(l[0]) + std::exp(l[1]);
  const double pi[3] = {std::exp(l[0]) / unmasked, std::exp(l[1]) / unmasked, 0.0};
  const double p0_with_masked = std::exp(l[0]) / (unmasked + std::exp(l[2]));
  // chose0 / tokens is a binomial proportion: 5 standard deviations of it (0.012 here) are far
  // below the 0.11 that the wrong distribution moves it by.
  const double sigma0 = std::sqrt(pi[0] * (1 - pi[0]) / tokens);
  ASSERT_LT(5 * sigma0, (pi[0] - p0_with_masked) / 2);
  SparseMixerRouteArgs args;
  args.params.jitter = 0.1;
  args.rng = CounterRng{5, make_stream(RngTag::kSparseMixer, 0, 0)};
  SmOut out(tokens, experts);
  for (auto mask : {SparseMixerMask::kPaper, SparseMixerMask::kReferenceCode}) {
    for (auto policy : {SparseMixerMidpoint::kPaper, SparseMixerMidpoint::kReferenceCode,
                        SparseMixerMidpoint::kEulerOnly}) {
      args.params.mask = mask;
      args.params.midpoint = policy;
      ASSERT_TRUE(out.route(args, logits).ok());
      int64_t chose0 = 0, halved = 0, masked_chosen = 0, bad_gate = 0, bad_row = 0;
      std::string first_bad;
      for (int64_t t = 0; t < tokens; ++t) {
        const int32_t d = out.idx.data<int32_t>()[t];
        chose0 += d == 0;
        masked_chosen += d == 2;
        const double c = out.scale.data<double>()[t];
        halved += c == 0.5;
        EXPECT_EQ(out.is_argmax.data<uint8_t>()[t], d == 1 ? 1 : 0);
        // The argmax keeps its full gate; a non-argmax draw is halved (paper), kept (Euler only)
        // or either (reference code).
        bool c_ok = c == 1.0;
        if (d != 1 && policy == SparseMixerMidpoint::kPaper) c_ok = c == 0.5;
        if (d != 1 && policy == SparseMixerMidpoint::kReferenceCode) c_ok = c == 0.5 || c == 1.0;
        const double gate = out.gate.data<double>()[t];
        if (d < 0 || d > 1 || !c_ok || std::fabs(gate - c * pi[d]) > 1e-15) {
          if (bad_gate++ == 0) {
            first_bad = "token " + std::to_string(t) + ": D " + std::to_string(d) + ", c " +
                        std::to_string(c) + ", gate " + std::to_string(gate);
          }
        }
        for (int64_t e = 0; e < experts; ++e) {
          bad_row += std::fabs(out.probs.data<double>()[t * 3 + e] - pi[e]) > 1e-15;
          bad_row += out.mask.data<uint8_t>()[t * 3 + e] != (e < 2 ? 1 : 0);
        }
      }
      const std::string what =
          std::string(mask == SparseMixerMask::kPaper ? "paper" : "reference") +
          " mask, midpoint " + std::to_string(static_cast<int>(policy));
      EXPECT_EQ(masked_chosen, 0) << what;
      EXPECT_EQ(bad_gate, 0) << what << ": want c pi_D with pi = (" << pi[0] << ", " << pi[1]
                             << ", 0); first " << first_bad;
      EXPECT_EQ(bad_row, 0) << what
                            << ": probs or mask rows differ from (pi_0, pi_1, 0), (1, 1, 0)";
      EXPECT_NEAR(static_cast<double>(chose0) / tokens, pi[0], 5 * sigma0) << what;
      // Paper and Euler-only are deterministic; the reference code halves half of the non-argmax
      // draws, a binomial proportion over chose0 tokens (5 standard deviations).
      if (policy == SparseMixerMidpoint::kPaper) {
        EXPECT_EQ(halved, chose0) << what;
      } else if (policy == SparseMixerMidpoint::kEulerOnly) {
        EXPECT_EQ(halved, 0) << what;
      } else {
        ASSERT_GT(chose0, 0) << what;
        const double sigma = std::sqrt(0.25 / static_cast<double>(chose0));
        EXPECT_NEAR(static_cast<double>(halved) / chose0, 0.5, 5 * sigma) << what;
      }
    }
  }
}

TEST(SparseMixerTest, GateGradientRulesByHand) {
  // One token, 3 experts all unmasked; D = 0 sampled with c = 1/2 (non-argmax), s = 0.8.
  Tensor probs = Tensor::from_vector<double>({1, 3}, {0.2, 0.5, 0.3});
  Tensor mask = Tensor::from_vector<uint8_t>({1, 3}, {1, 1, 1});
  Tensor idx = Tensor::from_vector<int32_t>({1, 1}, {0});
  Tensor d_gate = Tensor::from_vector<double>({1, 1}, {0.8});
  for (double c : {1.0, 0.5}) {
    Tensor scale = Tensor::from_vector<double>({1}, {c});
    for (auto rule : {SparseMixerGateGrad::kReferenceCode, SparseMixerGateGrad::kPaper}) {
      Tensor d_logits = Tensor::zeros({1, 3}, DType::kF64);
      ASSERT_TRUE(
          sparsemixer_backward(ctx(), rule, d_gate, idx, probs, mask, scale, d_logits).ok());
      const double dpi = rule == SparseMixerGateGrad::kReferenceCode ? 1.6 : (1 + c) * 0.8;
      // d theta_j = dpi * pi_D * (1[j = D] - pi_j)
      EXPECT_NEAR(d_logits.data<double>()[0], dpi * 0.2 * 0.8, 1e-15);
      EXPECT_NEAR(d_logits.data<double>()[1], dpi * 0.2 * -0.5, 1e-15);
      EXPECT_NEAR(d_logits.data<double>()[2], dpi * 0.2 * -0.3, 1e-15);
    }
  }
  // Only one expert unmasked: pi_D = 1 and the router gets exactly zero gradient (A.9 #7).
  Tensor one = Tensor::from_vector<double>({1, 3}, {1.0, 0.0, 0.0});
  Tensor one_mask = Tensor::from_vector<uint8_t>({1, 3}, {1, 0, 0});
  Tensor scale = Tensor::from_vector<double>({1}, {1.0});
  Tensor d_logits = Tensor::zeros({1, 3}, DType::kF64);
  ASSERT_TRUE(sparsemixer_backward(ctx(), SparseMixerGateGrad::kReferenceCode, d_gate, idx, one,
                                   one_mask, scale, d_logits)
                  .ok());
  EXPECT_EQ(to_vector<double>(d_logits), (std::vector<double>{0, 0, 0}));
}

// Why a SparseMixer router can stay degenerate (spec A.9 #7, and the 82-84% of tokens
// keeping one expert): the paper mask theta* - theta_i <= r (|theta*| + |theta_i|) is homogeneous
// in theta, so scaling the logits (a small or a large router initialisation) never widens it; for
// zero-mean logits with r = 0.1 most tokens keep only their argmax. Such a token gives the router
// no gradient, from the gate path (GateGradientRulesByHand) nor from the balance loss, whose mean
// probabilities go through the same masked softmax (checked here).
TEST(SparseMixerTest, TheMaskIsScaleInvariantAndSingleExpertTokensTeachTheRouterNothing) {
  const int64_t tokens = 2000, experts = 8;
  Tensor base = Tensor::empty({tokens, experts}, DType::kF64);
  fill_uniform(base, 11, -1, 1);
  SparseMixerRouteArgs args;
  args.training = false;
  args.params.jitter = 0.1;
  std::vector<int64_t> singles;
  for (double scale : {1e-3, 1.0, 1e3}) {
    Tensor logits = Tensor::empty({tokens, experts}, DType::kF64);
    for (int64_t i = 0; i < tokens * experts; ++i) {
      logits.data<double>()[i] = scale * base.data<double>()[i];
    }
    SmOut out(tokens, experts);
    ASSERT_TRUE(out.route(args, logits).ok());
    int64_t single = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      int64_t kept = 0;
      for (int64_t e = 0; e < experts; ++e) kept += out.mask.data<uint8_t>()[t * experts + e];
      single += kept == 1;
    }
    singles.push_back(single);
  }
  EXPECT_EQ(singles[0], singles[1]);
  EXPECT_EQ(singles[1], singles[2]);
  EXPECT_GT(singles[1], tokens / 2) << "most tokens keep one expert";

  // The balance loss through a masked softmax that keeps one expert: zero gradient for that token
  // (the second token keeps two experts and does get one).
  Tensor logits = Tensor::from_vector<double>({2, 3}, {0.05, 0.02, -0.01, 2.0, 1.8, -1.0});
  SmOut out(2, 3);
  ASSERT_TRUE(out.route(args, logits).ok());
  EXPECT_EQ(to_vector<uint8_t>(out.mask), (std::vector<uint8_t>{1, 0, 0, 1, 1, 0}));
  const std::vector<int64_t> load = {1, 0, 1};
  Tensor d_logits = Tensor::zeros({2, 3}, DType::kF64);
  ASSERT_TRUE(aux_losses_backward(ctx(), logits, out.probs, packed_sums(out.probs, out.lse, load),
                                  out.lse, {}, {1, 1.0, 0.0}, d_logits)
                  .ok());
  EXPECT_EQ(d_logits.data<double>()[0], 0.0);
  EXPECT_EQ(d_logits.data<double>()[1], 0.0);
  EXPECT_EQ(d_logits.data<double>()[2], 0.0);
  EXPECT_NE(d_logits.data<double>()[3], 0.0);
}

TEST(AuxLossTest, UniformRoutingGivesOneAndHandValues) {
  // 4 tokens, 2 experts, K = 1, uniform probabilities, each expert gets 2 tokens: E sum f P = 1.
  Tensor probs = Tensor::from_vector<double>({4, 2}, {0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5});
  Tensor lse = Tensor::from_vector<double>({4}, {1, 2, 3, 4});
  Tensor packed = packed_sums(probs, lse, {2, 2});
  EXPECT_EQ(to_vector<double>(packed), (std::vector<double>{2, 2, 2, 2, 4, 30, 0, 0, 0}));
  Aux l = aux_of(packed, 1);
  EXPECT_DOUBLE_EQ(l.balance, 1.0);
  EXPECT_DOUBLE_EQ(l.z, (1 + 4 + 9 + 16) / 4.0);
  // The weighted loss uses the coefficients.
  Tensor losses = Tensor::zeros({kAuxLossesSize}, DType::kF64);
  ASSERT_TRUE(aux_losses(ctx(), packed, {1, 0.01, 0.001}, losses).ok());
  EXPECT_DOUBLE_EQ(losses.data<double>()[2], 0.01 * 1.0 + 0.001 * 7.5);
  // Collapse: all 4 tokens to expert 0 with P = (0.9, 0.1): 2 * (1 * 0.9 + 0 * 0.1) = 1.8.
  Tensor probs2 = Tensor::from_vector<double>({4, 2}, {0.9, 0.1, 0.9, 0.1, 0.9, 0.1, 0.9, 0.1});
  Tensor packed2 = packed_sums(probs2, lse, {4, 0});
  EXPECT_NEAR(aux_of(packed2, 1).balance, 1.8, 1e-15);
  // Global scope: two ranks' packed sums add up (an all-reduce) to the loss over all 8 tokens.
  for (int64_t i = 0; i < packed.numel(); ++i)
    packed.data<double>()[i] += packed2.data<double>()[i];
  EXPECT_NEAR(aux_of(packed, 1).balance, 2 * ((6.0 / 8) * (5.6 / 8) + (2.0 / 8) * (2.4 / 8)),
              1e-15);
  // No tokens: zero losses.
  Tensor none = Tensor::zeros({9}, DType::kF64);
  EXPECT_EQ(aux_of(none, 1).balance, 0.0);
}

// K = 2: f_e is the share of the T x K routed slots (Switch's fraction of tokens, per choice).
// Two experts and K = 2 send every token to both: f = (1/2, 1/2), uniform P: E sum f P = 1 (with
// f = load / T instead, 2). Four experts, K = 2, T = 4, loads (4, 2, 1, 1) of 8 slots and every
// token's P = (0.4, 0.3, 0.2, 0.1): 4 (4/8 0.4 + 2/8 0.3 + 1/8 0.2 + 1/8 0.1) = 1.25, by hand.
TEST(AuxLossTest, TopTwoHandValues) {
  Tensor probs = Tensor::from_vector<double>({4, 2}, {0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5});
  Tensor lse = Tensor::from_vector<double>({4}, {0, 0, 0, 0});
  EXPECT_DOUBLE_EQ(aux_of(packed_sums(probs, lse, {4, 4}), 2).balance, 1.0);
  std::vector<double> p4;
  for (int t = 0; t < 4; ++t) p4.insert(p4.end(), {0.4, 0.3, 0.2, 0.1});
  Tensor probs4 = Tensor::from_vector<double>({4, 4}, p4);
  EXPECT_NEAR(aux_of(packed_sums(probs4, lse, {4, 2, 1, 1}), 2).balance, 1.25, 1e-15);
}

TEST(AuxLossTest, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 6, experts = 5, k = 2;
  Tensor logits = Tensor::empty({tokens, experts}, DType::kF64);
  fill_uniform(logits, 3, -2, 2);
  const std::vector<int64_t> load = {3, 0, 4, 2, 3};  // held fixed
  Tensor idx = Tensor::empty({tokens, k}, DType::kI32);
  Tensor gate = Tensor::empty({tokens, k}, DType::kF64);
  Tensor probs = Tensor::empty({tokens, experts}, DType::kF64);
  Tensor lse = Tensor::empty({tokens}, DType::kF64);
  const double wb = 0.7, wz = 0.3;
  auto loss = [&]() {
    EXPECT_TRUE(topk_softmax(ctx(), logits, idx, gate, probs, lse).ok());
    Aux l = aux_of(packed_sums(probs, lse, load), k);
    return wb * l.balance + wz * l.z;
  };
  loss();
  Tensor d_logits = Tensor::zeros({tokens, experts}, DType::kF64);
  ASSERT_TRUE(aux_losses_backward(ctx(), logits, probs, packed_sums(probs, lse, load), lse, {},
                                  {k, wb, wz}, d_logits)
                  .ok());
  for (const auto& f : check_gradients(loss, {{"logits", logits, d_logits}})) ADD_FAILURE() << f;
}

TEST(SequenceCountsTest, HandValuesAndErrors) {
  // Three sequences of two tokens, K = 2, E = 4.
  Tensor idx = Tensor::from_vector<int32_t>({6, 2}, {0, 1, 1, 2, 3, 0, 3, 2, 1, 0, 0, 1});
  Tensor counts = Tensor::empty({3, 4}, DType::kI64);
  ASSERT_TRUE(sequence_counts(ctx(), idx, counts).ok());
  EXPECT_EQ(to_vector<int64_t>(counts), (std::vector<int64_t>{1, 2, 1, 0, 1, 0, 1, 2, 2, 2, 0, 0}));
  Tensor four = Tensor::empty({4, 4}, DType::kI64);  // 6 tokens are not 4 equal sequences
  EXPECT_EQ(sequence_counts(ctx(), idx, four).code(), StatusCode::kInvalidArgument);
  Tensor i32 = Tensor::empty({3, 4}, DType::kI32);
  EXPECT_EQ(sequence_counts(ctx(), idx, i32).code(), StatusCode::kInvalidArgument);
}

// DeepSeek-V3's sequence-wise loss by hand: E = 2, K = 1, two sequences of S = 2 tokens.
// Sequence 0 routes both tokens to expert 0: f = E / (K S) n = (2, 0), P = (0.8, 0.2), L = 1.6.
// Sequence 1 routes one token to each: f = (1, 1), P = (0.4, 0.6), L = 1. The loss is the mean
// 1.3. Another rank's sequence (f = (0, 2), P = (0.3, 0.7), L = 1.4) added to the pack gives the
// mean over all three, 4/3.
TEST(SequenceLossTest, HandValuesAndTheGlobalMean) {
  Tensor probs = Tensor::from_vector<double>({4, 2}, {0.9, 0.1, 0.7, 0.3, 0.6, 0.4, 0.2, 0.8});
  Tensor lse = Tensor::zeros({4}, DType::kF64);
  Tensor idx = Tensor::from_vector<int32_t>({4, 1}, {0, 0, 0, 1});
  Tensor counts = Tensor::empty({2, 2}, DType::kI64);
  ASSERT_TRUE(sequence_counts(ctx(), idx, counts).ok());
  Tensor packed = packed_sums(probs, lse, {3, 1}, counts);
  // q_e = sum_b n_be P_be / S^2 = (2 * 1.6 + 1 * 0.8, 1 * 1.2) / 4, then B = 2.
  EXPECT_NEAR(packed.data<double>()[6], 1.0, 1e-15);
  EXPECT_NEAR(packed.data<double>()[7], 0.3, 1e-15);
  EXPECT_EQ(packed.data<double>()[8], 2.0);
  Tensor losses = Tensor::zeros({kAuxLossesSize}, DType::kF64);
  AuxLossWeights w{1, 0.01, 0.0, 0.1};
  ASSERT_TRUE(aux_losses(ctx(), packed, w, losses).ok());
  EXPECT_NEAR(losses.data<double>()[3], 1.3, 1e-15);
  const double balance = losses.data<double>()[0];
  EXPECT_NEAR(losses.data<double>()[2], 0.01 * balance + 0.1 * 1.3, 1e-15);
  // Without the counts, the sequence slots and the loss are zero.
  Tensor plain = packed_sums(probs, lse, {3, 1});
  ASSERT_TRUE(aux_losses(ctx(), plain, w, losses).ok());
  EXPECT_EQ(losses.data<double>()[3], 0.0);
  EXPECT_EQ(plain.data<double>()[8], 0.0);
  // A second rank's sums add up to the mean over every sequence.
  Tensor probs2 = Tensor::from_vector<double>({2, 2}, {0.5, 0.5, 0.1, 0.9});
  Tensor idx2 = Tensor::from_vector<int32_t>({2, 1}, {1, 1});
  Tensor counts2 = Tensor::empty({1, 2}, DType::kI64);
  ASSERT_TRUE(sequence_counts(ctx(), idx2, counts2).ok());
  Tensor packed2 = packed_sums(probs2, Tensor::zeros({2}, DType::kF64), {0, 2}, counts2);
  for (int64_t i = 0; i < packed.numel(); ++i) {
    packed.data<double>()[i] += packed2.data<double>()[i];
  }
  ASSERT_TRUE(aux_losses(ctx(), packed, w, losses).ok());
  EXPECT_NEAR(losses.data<double>()[3], (1.6 + 1.0 + 1.4) / 3, 1e-15);
}

// The balance, z and sequence losses through softmax or sigmoid probabilities (loads and counts
// held fixed, as the routing is piecewise constant), against finite differences.
TEST(SequenceLossTest, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 8, experts = 5, k = 2, sequences = 2;
  for (ScoreFunction score : {ScoreFunction::kSoftmax, ScoreFunction::kSigmoid}) {
    Tensor logits = Tensor::empty({tokens, experts}, DType::kF64);
    fill_uniform(logits, 21, -2, 2);
    RouteOptions opt;
    opt.score = score;
    RouteOut out(tokens, experts, k);
    ASSERT_TRUE(out.route(opt, logits).ok());
    Tensor counts = Tensor::empty({sequences, experts}, DType::kI64);
    ASSERT_TRUE(sequence_counts(ctx(), out.idx, counts).ok());
    const std::vector<int64_t> load = {3, 5, 4, 2, 2};
    const AuxLossWeights w{k, 0.7, 0.3, 0.9, score};
    auto loss = [&]() {
      EXPECT_TRUE(out.route(opt, logits).ok());
      Tensor losses = Tensor::zeros({kAuxLossesSize}, DType::kF64);
      EXPECT_TRUE(aux_losses(ctx(), packed_sums(out.probs, out.lse, load, counts), w, losses).ok());
      return losses.data<double>()[2];
    };
    loss();
    Tensor d_logits = Tensor::zeros({tokens, experts}, DType::kF64);
    ASSERT_TRUE(aux_losses_backward(ctx(), logits, out.probs,
                                    packed_sums(out.probs, out.lse, load, counts), out.lse, counts,
                                    w, d_logits)
                    .ok());
    for (const auto& f : check_gradients(loss, {{"logits", logits, d_logits}})) {
      ADD_FAILURE() << (score == ScoreFunction::kSigmoid ? "sigmoid: " : "softmax: ") << f;
    }
  }
}

TEST(SequenceLossTest, ArgumentErrors) {
  Tensor probs = Tensor::zeros({6, 2}, DType::kF64), lse = Tensor::zeros({6}, DType::kF64);
  Tensor load = Tensor::zeros({2}, DType::kI64);
  Tensor packed = Tensor::empty({aux_packed_size(2)}, DType::kF64);
  Tensor four = Tensor::zeros({4, 2}, DType::kI64);  // 6 rows are not 4 sequences
  EXPECT_EQ(aux_sums(ctx(), probs, lse, load, four, 6, packed).code(),
            StatusCode::kInvalidArgument);
  Tensor wide = Tensor::zeros({2, 3}, DType::kI64);
  EXPECT_EQ(aux_sums(ctx(), probs, lse, load, wide, 6, packed).code(),
            StatusCode::kInvalidArgument);
  Tensor d = Tensor::zeros({6, 2}, DType::kF64);
  EXPECT_EQ(aux_losses_backward(ctx(), probs, probs, packed, lse, four, {1}, d).code(),
            StatusCode::kInvalidArgument);
  Tensor old_pack = Tensor::zeros({8}, DType::kF64);  // [2E + 2] of E = 3: the old layout
  Tensor losses = Tensor::zeros({kAuxLossesSize}, DType::kF64);
  EXPECT_EQ(aux_losses(ctx(), old_pack, {1}, losses).code(), StatusCode::kInvalidArgument);
}

// The AC metric's long sums follow chunked_sum's order on both backends (a GPU runs one thread
// per run). One large term then ones: left to right every 1 is lost against 1e16 (its ulp is 2),
// while runs of 64 ones sum exactly first. The expected value spells out the three levels.
TEST(ChunkedSumTest, RunsOfSixtyFourThenTheirSums) {
  constexpr int64_t n = 64 * 64 + 5;
  std::vector<double> x(n, 1.0);
  x[0] = 1e16;
  double level1[65];
  for (int64_t j = 0; j < 65; ++j) {
    level1[j] = 0;
    for (int64_t i = j * 64; i < std::min<int64_t>(n, (j + 1) * 64); ++i) level1[j] += x[i];
  }
  double level2[2] = {0, 0};
  for (int64_t j = 0; j < 64; ++j) level2[0] += level1[j];
  level2[1] += level1[64];
  const double want = level2[0] + level2[1];
  std::vector<double> scratch(ref::sum_runs(n));
  const double got = ref::chunked_sum(x.data(), n, scratch.data());
  EXPECT_EQ(got, want);
  double left_to_right = 0;
  for (double v : x) left_to_right += v;
  EXPECT_NE(got, left_to_right);  // the order is visible at this input
  EXPECT_EQ(ref::chunked_sum(x.data(), 64, scratch.data()), ref::run_sum(x.data(), 64));
  EXPECT_EQ(ref::chunked_sum(x.data(), 0, scratch.data()), 0.0);
}

TEST(AcMetricTest, MadAndBothNormalisations) {
  // D = 2, E = 3. Cluster 0: rows (0, 0), (2, 4) -> mean (1, 2), MAD (1, 2).
  // Cluster 1: one row -> tiny with min_cluster_size 2 (identity). Cluster 2: empty (identity).
  Tensor x = Tensor::from_vector<double>({3, 2}, {0, 0, 5, 5, 2, 4});
  Tensor labels = Tensor::from_vector<int32_t>({3}, {0, 1, 0});
  Tensor sums = Tensor::empty({3, 2}, DType::kF64), abs_dev = Tensor::empty({3, 2}, DType::kF64);
  Tensor counts = Tensor::empty({3}, DType::kI64);
  ASSERT_TRUE(ac_cluster_sums(ctx(), x, labels, sums, counts).ok());
  ASSERT_TRUE(ac_cluster_abs_dev(ctx(), x, labels, sums, counts, abs_dev).ok());
  EXPECT_EQ(to_vector<int64_t>(counts), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(to_vector<double>(abs_dev), (std::vector<double>{2, 4, 0, 0, 0, 0}));

  AcRouterParams params;
  params.eps = 1e-4;
  Tensor metric = Tensor::empty({3, 2}, DType::kF64);
  Tensor summary = Tensor::empty({kAcSummarySize}, DType::kF64);
  ASSERT_TRUE(ac_metric(ctx(), params, abs_dev, counts, metric, summary).ok());
  EXPECT_EQ(summary.data<double>()[0], 2);  // tiny clusters
  // Paper: w = (1/1.0001, 1/2.0001), scaled to mean 1 over features.
  const double w0 = 1 / 1.0001, w1 = 1 / 2.0001;
  EXPECT_NEAR(metric.data<double>()[0], 2 * w0 / (w0 + w1), 1e-14);
  EXPECT_NEAR(metric.data<double>()[1], 2 * w1 / (w0 + w1), 1e-14);
  EXPECT_EQ(metric.data<double>()[2], 1.0);
  EXPECT_EQ(metric.data<double>()[5], 1.0);

  // Reference code with every cluster (min_cluster_size 0): MAD 0 -> W = 1e4, clipped at
  // 10 x the mean, then each feature normalised to mean 1 over the three clusters.
  params.normalization = AcNormalization::kReferenceCode;
  params.min_cluster_size = 0;
  ASSERT_TRUE(ac_metric(ctx(), params, abs_dev, counts, metric, summary).ok());
  EXPECT_EQ(summary.data<double>()[0], 0);
  const double raw[6] = {w0, w1, 1e4, 1e4, 1e4, 1e4};
  double mean = 0;
  for (double v : raw) mean += v / 6;
  double clipped[6];
  for (int i = 0; i < 6; ++i) clipped[i] = std::min(raw[i], 10 * mean);
  for (int q = 0; q < 2; ++q) {
    const double col = (clipped[q] + clipped[2 + q] + clipped[4 + q]) / 3;
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(metric.data<double>()[k * 2 + q], clipped[k * 2 + q] / col, 1e-12);
    }
  }
  EXPECT_EQ(summary.data<double>()[1], 0.0);  // 10 x mean is above every weight here
  double lo = 1e300, hi = -1e300, sum = 0;
  for (int i = 0; i < 6; ++i) {
    lo = std::min(lo, metric.data<double>()[i]);
    hi = std::max(hi, metric.data<double>()[i]);
    sum += metric.data<double>()[i];
  }
  EXPECT_EQ(summary.data<double>()[2], lo);
  EXPECT_EQ(summary.data<double>()[3], hi);
  EXPECT_NEAR(summary.data<double>()[4], sum / 6, 1e-14);
}

TEST(AcMetricTest, ReferenceCodeClipsOutliers) {
  // 20 clusters of 2 tokens, D = 2. Cluster 0 is perfectly tight (MAD 0 -> W = 1 / eps = 1e4);
  // the others have MAD 1 (W ~ 1). The mean is ~501, so cluster 0 is clipped to 10 x mean.
  const int64_t experts = 20;
  Tensor abs_dev = Tensor::empty({experts, 2}, DType::kF64);
  Tensor counts = Tensor::empty({experts}, DType::kI64);
  for (int64_t k = 0; k < experts; ++k) {
    counts.data<int64_t>()[k] = 2;
    abs_dev.data<double>()[2 * k] = abs_dev.data<double>()[2 * k + 1] = k == 0 ? 0.0 : 2.0;
  }
  AcRouterParams params;
  params.normalization = AcNormalization::kReferenceCode;
  Tensor metric = Tensor::empty({experts, 2}, DType::kF64);
  Tensor summary = Tensor::empty({kAcSummarySize}, DType::kF64);
  ASSERT_TRUE(ac_metric(ctx(), params, abs_dev, counts, metric, summary).ok());
  EXPECT_DOUBLE_EQ(summary.data<double>()[1], 2.0 / 40.0);
  const double w = 1 / 1.0001, mean = (38 * w + 2e4) / 40, cap = 10 * mean;
  const double col = (cap + 19 * w) / 20;
  EXPECT_NEAR(metric.data<double>()[0], cap / col, 1e-12);
  EXPECT_NEAR(metric.data<double>()[2], w / col, 1e-12);
}

TEST(AcMetricTest, ApplyAndBackward) {
  Tensor x = Tensor::from_vector<double>({2, 2}, {1, 2, 3, 4});
  Tensor labels = Tensor::from_vector<int32_t>({2}, {1, 0});
  Tensor metric = Tensor::from_vector<double>({2, 2}, {10, 20, 0.5, 2});
  Tensor out = Tensor::empty({2, 2}, DType::kF64);
  ASSERT_TRUE(ac_apply_metric(ctx(), x, labels, metric, out).ok());
  EXPECT_EQ(to_vector<double>(out), (std::vector<double>{0.5, 4, 30, 80}));
  Tensor dx = Tensor::from_vector<double>({2, 2}, {1, 1, 1, 1});
  ASSERT_TRUE(ac_apply_metric_backward(ctx(), x, labels, metric, dx).ok());
  EXPECT_EQ(to_vector<double>(dx), (std::vector<double>{1.5, 5, 31, 81}));
  // bf16 activations: the router input is f32 (x widened exactly), the gradient accumulates into
  // bf16 once per element.
  Tensor xb = Tensor::empty({2, 2}, DType::kBF16);
  for (int i = 0; i < 4; ++i) xb.data<bf16>()[i] = bf16(static_cast<float>(i + 1));
  Tensor mf = Tensor::from_vector<float>({2, 2}, {10, 20, 0.5, 2});
  Tensor outf = Tensor::empty({2, 2}, DType::kF32);
  ASSERT_TRUE(ac_apply_metric(ctx(), xb, labels, mf, outf).ok());
  EXPECT_EQ(to_vector<float>(outf), (std::vector<float>{0.5, 4, 30, 80}));
  EXPECT_EQ(ac_apply_metric(ctx(), xb, labels, mf, Tensor::empty({2, 2}, DType::kBF16)).code(),
            StatusCode::kInvalidArgument);
  Tensor bad = Tensor::from_vector<int32_t>({2}, {1, 2});
  EXPECT_EQ(ac_apply_metric(ctx(), x, bad, metric, out).code(), StatusCode::kInvalidArgument);
}

// Unit-norm expert embeddings: the columns of a [D, E] weight scaled to norm 1 (a zero column
// stays zero), and the gradient through the scaling against finite differences.
TEST(NormalizeColumnsTest, HandValuesAndBackwardMatchesFiniteDifferences) {
  Tensor w = Tensor::from_vector<double>({2, 3}, {3, 0, 1, 4, 0, -1});
  Tensor out = Tensor::empty({2, 3}, DType::kF64);
  Tensor inv = Tensor::empty({3}, DType::kF64);
  ASSERT_TRUE(normalize_columns(ctx(), w, out, inv).ok());
  const double r2 = 1 / std::sqrt(2.0);
  const std::vector<double> want_out = {0.6, 0, r2, 0.8, 0, -r2};
  const std::vector<double> got = to_vector<double>(out);
  for (size_t i = 0; i < want_out.size(); ++i) EXPECT_NEAR(got[i], want_out[i], 1e-15) << i;
  const std::vector<double> got_inv = to_vector<double>(inv);
  EXPECT_NEAR(got_inv[0], 0.2, 1e-15);
  EXPECT_EQ(got_inv[1], 0);
  EXPECT_NEAR(got_inv[2], r2, 1e-15);

  const int64_t d = 5, experts = 4;
  Tensor weight = Tensor::empty({d, experts}, DType::kF64);
  fill_uniform(weight, 3, -1, 1);
  Tensor g = Tensor::empty({d, experts}, DType::kF64);
  fill_uniform(g, 4);
  Tensor unit = Tensor::empty({d, experts}, DType::kF64);
  Tensor inv_norm = Tensor::empty({experts}, DType::kF64);
  auto loss = [&]() {
    EXPECT_TRUE(normalize_columns(ctx(), weight, unit, inv_norm).ok());
    return moe::testing::dot(unit, g);
  };
  loss();
  Tensor dw = Tensor::zeros({d, experts}, DType::kF64);
  ASSERT_TRUE(normalize_columns_backward(ctx(), g, unit, inv_norm, dw).ok());
  for (const auto& f : check_gradients(loss, {{"w", weight, dw}})) ADD_FAILURE() << f;
  // It accumulates (at the unperturbed weight again: the check left the last probe's values).
  loss();
  Tensor twice = Tensor::copy_of(dw);
  ASSERT_TRUE(normalize_columns_backward(ctx(), g, unit, inv_norm, twice).ok());
  const std::vector<double> a = to_vector<double>(dw), b2 = to_vector<double>(twice);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b2[i], 2 * a[i], 1e-15);
  EXPECT_EQ(normalize_columns(ctx(), weight, unit, Tensor::empty({3}, DType::kF64)).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::kernels
