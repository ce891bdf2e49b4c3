// Causal attention core (kernels/attention.h) against explicit loops: outputs and saved
// probabilities for awkward shapes (S = 1, B = 1, H = 1, Dh not a multiple of 4), the dropout
// mask recomputed from its documented key, masks independent of how sequences are batched, the
// backward against central finite differences in f64, and argument errors.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"

namespace moe::kernels {
namespace {

using moe::testing::check_gradients;
using moe::testing::dot;
using moe::testing::fill_uniform;

struct Dims {
  int64_t batch, seq, heads, head_dim;
};

std::string name(const Dims& d) {
  return str_cat("B", d.batch, "_S", d.seq, "_H", d.heads, "_Dh", d.head_dim);
}
void PrintTo(const Dims& d, std::ostream* os) { *os << name(d); }

// Element (b, h, i, j) of the dropout scale, from the key documented in kernels/attention.h.
double mask_scale(const AttentionArgs& a, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (a.dropout == 0.f) return 1.0;
  const uint64_t key = static_cast<uint64_t>(
      (((a.sequence_offset + b) * a.heads + h) * a.seq_len + i) * a.seq_len + j);
  return a.rng.uniform(key) >= a.dropout ? 1.0 / (1.0 - a.dropout) : 0.0;
}

// out [B*S, D] and probs [B, H, S, S] by the textbook formula (no max subtraction; the inputs
// are small), qkv read as [B, S, 3, H, Dh].
void naive_attention(const AttentionArgs& a, int64_t dh, const std::vector<double>& qkv,
                     std::vector<double>* out, std::vector<double>* probs) {
  const int64_t S = a.seq_len, H = a.heads, D = H * dh;
  out->assign(a.batch * S * D, 0.0);
  probs->assign(a.batch * H * S * S, 0.0);
  auto at = [&](int64_t b, int64_t s, int64_t part, int64_t h, int64_t c) {
    return qkv[((b * S + s) * 3 + part) * D + h * dh + c];
  };
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < S; ++i) {
        std::vector<double> w(i + 1);
        double z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double score = 0;
          for (int64_t c = 0; c < dh; ++c) score += at(b, i, 0, h, c) * at(b, j, 1, h, c);
          w[j] = std::exp(score / std::sqrt(static_cast<double>(dh)));
          z += w[j];
        }
        for (int64_t j = 0; j <= i; ++j) (*probs)[((b * H + h) * S + i) * S + j] = w[j] / z;
        for (int64_t c = 0; c < dh; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j)
            o += w[j] / z * mask_scale(a, b, h, i, j) * at(b, j, 2, h, c);
          (*out)[(b * S + i) * D + h * dh + c] = o;
        }
      }
    }
  }
}

class AttentionShapes : public ::testing::TestWithParam<Dims> {};

TEST_P(AttentionShapes, ForwardMatchesLoopsWithAndWithoutDropout) {
  const Dims d = GetParam();
  const int64_t D = d.heads * d.head_dim, N = d.batch * d.seq;
  for (float p : {0.f, 0.4f}) {
    SCOPED_TRACE(str_cat("dropout ", p));
    AttentionArgs args{d.batch, d.seq, d.heads, p, CounterRng{7, make_stream(RngTag::kTest, 3, 1)},
                       11};
    Tensor qkv = Tensor::empty({N, 3 * D}, DType::kF64);
    fill_uniform(qkv, 1, -1.5, 1.5);
    Tensor out = Tensor::empty({N, D}, DType::kF64);
    Tensor probs = Tensor::empty({d.batch, d.heads, d.seq, d.seq}, DType::kF64);
    fill_uniform(probs, 99);  // stale contents must be overwritten
    ASSERT_TRUE(attention_forward(args, qkv, out, probs).ok());
    std::vector<double> want_out, want_probs;
    naive_attention(args, d.head_dim, to_vector<double>(qkv), &want_out, &want_probs);
    for (int64_t i = 0; i < out.numel(); ++i)
      EXPECT_NEAR(out.data<double>()[i], want_out[i], 1e-13) << i;
    for (int64_t i = 0; i < probs.numel(); ++i)
      EXPECT_NEAR(probs.data<double>()[i], want_probs[i], 1e-14) << i;

    // f32: the same computation within single-precision rounding.
    Tensor qkv32 = Tensor::empty({N, 3 * D}, DType::kF32);
    fill_uniform(qkv32, 1, -1.5, 1.5);
    Tensor out32 = Tensor::empty({N, D}, DType::kF32);
    Tensor probs32 = Tensor::empty({d.batch, d.heads, d.seq, d.seq}, DType::kF32);
    ASSERT_TRUE(attention_forward(args, qkv32, out32, probs32).ok());
    std::vector<double> qkv_as_f64(qkv32.numel());
    for (int64_t i = 0; i < qkv32.numel(); ++i) qkv_as_f64[i] = qkv32.data<float>()[i];
    naive_attention(args, d.head_dim, qkv_as_f64, &want_out, &want_probs);
    for (int64_t i = 0; i < out32.numel(); ++i)
      EXPECT_NEAR(out32.data<float>()[i], want_out[i], 2e-6) << i;
  }
}

TEST_P(AttentionShapes, BackwardMatchesFiniteDifferences) {
  const Dims d = GetParam();
  const int64_t D = d.heads * d.head_dim, N = d.batch * d.seq;
  for (float p : {0.f, 0.3f}) {
    SCOPED_TRACE(str_cat("dropout ", p));
    const AttentionArgs args{
        d.batch, d.seq, d.heads, p, CounterRng{4, make_stream(RngTag::kTest, 2, 0)}, 3};
    Tensor qkv = Tensor::empty({N, 3 * D}, DType::kF64);
    fill_uniform(qkv, 5, -1, 1);
    Tensor out = Tensor::empty({N, D}, DType::kF64);
    Tensor probs = Tensor::empty({d.batch, d.heads, d.seq, d.seq}, DType::kF64);
    Tensor w = Tensor::empty({N, D}, DType::kF64);
    fill_uniform(w, 6);
    auto loss = [&]() {
      EXPECT_TRUE(attention_forward(args, qkv, out, probs).ok());
      return dot(out, w);
    };
    loss();
    Tensor d_qkv = Tensor::empty(qkv.shape(), DType::kF64);
    fill_uniform(d_qkv, 77);  // overwritten, not accumulated
    ASSERT_TRUE(attention_backward(args, w, qkv, probs, d_qkv).ok());
    for (const auto& f : check_gradients(loss, {{"qkv", qkv, d_qkv}}, {1e-6, 1e-8, 1e-6})) {
      ADD_FAILURE() << f;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionShapes,
                         ::testing::Values(Dims{1, 1, 1, 1}, Dims{1, 1, 2, 3}, Dims{2, 5, 2, 3},
                                           Dims{1, 7, 3, 5}, Dims{3, 4, 1, 2}, Dims{1, 9, 1, 6}),
                         [](const ::testing::TestParamInfo<Dims>& info) {
                           return name(info.param);
                         });

TEST(AttentionTest, ProbabilitiesAreCausalRowsSummingToOne) {
  const int64_t B = 2, S = 6, H = 3, Dh = 2, D = H * Dh;
  Tensor qkv = Tensor::empty({B * S, 3 * D}, DType::kF64);
  fill_uniform(qkv, 8, -30, 30);  // large scores: the max subtraction keeps exp finite
  Tensor out = Tensor::empty({B * S, D}, DType::kF64);
  Tensor probs = Tensor::empty({B, H, S, S}, DType::kF64);
  ASSERT_TRUE(attention_forward({B, S, H, 0.f, {}, 0}, qkv, out, probs).ok());
  for (int64_t r = 0; r < B * H * S; ++r) {
    const int64_t i = r % S;
    double sum = 0;
    for (int64_t j = 0; j < S; ++j) {
      const double pij = probs.data<double>()[r * S + j];
      ASSERT_TRUE(std::isfinite(pij));
      if (j > i) {
        EXPECT_EQ(pij, 0.0);
      }
      sum += pij;
    }
    EXPECT_NEAR(sum, 1.0, 1e-14);
  }
  // Position 0 attends only to itself: its output is its own value row.
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t c = 0; c < Dh; ++c) {
      EXPECT_DOUBLE_EQ(out.data<double>()[h * Dh + c], qkv.data<double>()[2 * D + h * Dh + c]);
    }
  }
}

TEST(AttentionTest, DropoutMaskIsKeyedByGlobalSequenceNotBatchPosition) {
  const int64_t B = 3, S = 5, H = 2, Dh = 3, D = H * Dh;
  const CounterRng rng{21, make_stream(RngTag::kTest, 4, 2)};
  Tensor qkv = Tensor::empty({B * S, 3 * D}, DType::kF32);
  fill_uniform(qkv, 9);
  Tensor out = Tensor::empty({B * S, D}, DType::kF32);
  Tensor probs = Tensor::empty({B, H, S, S}, DType::kF32);
  ASSERT_TRUE(attention_forward({B, S, H, 0.5f, rng, 40}, qkv, out, probs).ok());
  for (int64_t b = 0; b < B; ++b) {
    Tensor one_out = Tensor::empty({S, D}, DType::kF32);
    Tensor one_probs = Tensor::empty({1, H, S, S}, DType::kF32);
    ASSERT_TRUE(attention_forward({1, S, H, 0.5f, rng, 40 + b}, qkv.view().rows(b * S, (b + 1) * S),
                                  one_out, one_probs)
                    .ok());
    EXPECT_TRUE(moe::testing::bitwise_equal(one_out, out.view().rows(b * S, (b + 1) * S))) << b;
  }
  // The same call again gives the same bits; p = 0 with any stream equals no dropout at all.
  Tensor again = Tensor::empty({B * S, D}, DType::kF32);
  ASSERT_TRUE(attention_forward({B, S, H, 0.5f, rng, 40}, qkv, again, probs).ok());
  EXPECT_TRUE(moe::testing::bitwise_equal(again, out));
  Tensor plain = Tensor::empty({B * S, D}, DType::kF32);
  Tensor zero_p = Tensor::empty({B * S, D}, DType::kF32);
  ASSERT_TRUE(attention_forward({B, S, H, 0.f, {}, 0}, qkv, plain, probs).ok());
  ASSERT_TRUE(attention_forward({B, S, H, 0.f, rng, 40}, qkv, zero_p, probs).ok());
  EXPECT_TRUE(moe::testing::bitwise_equal(plain, zero_p));
  EXPECT_FALSE(moe::testing::bitwise_equal(plain, out));
}

TEST(AttentionTest, DropoutKeepsAboutOneMinusP) {
  const AttentionArgs a{4, 64, 2, 0.25f, CounterRng{3, make_stream(RngTag::kTest, 5, 0)}, 0};
  int64_t kept = 0, total = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t h = 0; h < a.heads; ++h) {
      for (int64_t i = 0; i < a.seq_len; ++i) {
        for (int64_t j = 0; j <= i; ++j, ++total) kept += mask_scale(a, b, h, i, j) > 0;
      }
    }
  }
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(total), 0.75, 0.01);
}

void expect_invalid(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(AttentionTest, BadArgumentsAreInvalidArgument) {
  const int64_t B = 2, S = 3, H = 2, D = 4;
  Tensor qkv = Tensor::zeros({B * S, 3 * D}, DType::kF32);
  Tensor out = Tensor::zeros({B * S, D}, DType::kF32);
  Tensor probs = Tensor::zeros({B, H, S, S}, DType::kF32);
  const AttentionArgs ok{B, S, H, 0.f, {}, 0};
  ASSERT_TRUE(attention_forward(ok, qkv, out, probs).ok());
  expect_invalid(attention_forward({B, S, 3, 0.f, {}, 0}, qkv, out, probs),
                 "qkv");  // H = 3 does not divide D = 4
  expect_invalid(attention_forward({B, S + 1, H, 0.f, {}, 0}, qkv, out, probs), "qkv");
  expect_invalid(attention_forward({0, S, H, 0.f, {}, 0}, qkv, out, probs), "batch");
  expect_invalid(attention_forward({B, S, H, 1.f, {}, 0}, qkv, out, probs), "dropout");
  expect_invalid(attention_forward({B, S, H, -0.1f, {}, 0}, qkv, out, probs), "dropout");
  Tensor out_bad = Tensor::zeros({B * S, D + 1}, DType::kF32);
  expect_invalid(attention_forward(ok, qkv, out_bad, probs), "out");
  Tensor out_f64 = Tensor::zeros({B * S, D}, DType::kF64);
  expect_invalid(attention_forward(ok, qkv, out_f64, probs), "out");
  Tensor probs_bad = Tensor::zeros({B, H, S, S + 1}, DType::kF32);
  expect_invalid(attention_forward(ok, qkv, out, probs_bad), "probs");
  Tensor qkv_i32 = Tensor::zeros({B * S, 3 * D}, DType::kI32);
  expect_invalid(attention_forward(ok, qkv_i32, out, probs), "qkv");
  Tensor d_qkv_bad = Tensor::zeros({B * S, 3 * D - 1}, DType::kF32);
  expect_invalid(attention_backward(ok, out, qkv, probs, d_qkv_bad), "d_qkv");
  Tensor d_qkv = Tensor::zeros({B * S, 3 * D}, DType::kF32);
  expect_invalid(attention_backward(ok, out_bad, qkv, probs, d_qkv), "d_out");
  expect_invalid(attention_backward(ok, out, qkv, probs_bad, d_qkv), "probs");
}

}  // namespace
}  // namespace moe::kernels
