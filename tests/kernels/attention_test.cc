// Causal attention core (kernels/attention.h) against explicit loops: outputs and the saved row
// logsumexp for awkward shapes (S = 1, B = 1, H = 1, Dh not a multiple of 4), the dropout mask
// recomputed from its documented key, masks independent of how sequences are batched, the
// backward (which recomputes the probabilities from the lse) against central finite differences
// in f64, bf16 activations against f32, and argument errors.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"
#include "tests/testing/scoped_env.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

using moe::testing::check_gradients;
using moe::testing::dot;
using moe::testing::expect_invalid;
using moe::testing::fill_uniform;

Context& ctx() { return testing::host_context(); }

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

// out [B*S, D] and the row logsumexp lse [B, H, S] by the textbook formula (no max subtraction;
// the inputs are small), qkv read as [B, S, 3, H, Dh].
void naive_attention(const AttentionArgs& a, int64_t dh, const std::vector<double>& qkv,
                     std::vector<double>* out, std::vector<double>* lse) {
  const int64_t S = a.seq_len, H = a.heads, D = H * dh;
  out->assign(a.batch * S * D, 0.0);
  lse->assign(a.batch * H * S, 0.0);
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
        (*lse)[(b * H + h) * S + i] = std::log(z);
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
    Tensor lse = Tensor::empty({d.batch, d.heads, d.seq}, DType::kF64);
    fill_uniform(lse, 99);  // stale contents must be overwritten
    ASSERT_TRUE(attention_forward(ctx(), args, qkv, out, lse).ok());
    std::vector<double> want_out, want_lse;
    naive_attention(args, d.head_dim, to_vector<double>(qkv), &want_out, &want_lse);
    for (int64_t i = 0; i < out.numel(); ++i)
      EXPECT_NEAR(out.data<double>()[i], want_out[i], 1e-13) << i;
    for (int64_t i = 0; i < lse.numel(); ++i)
      EXPECT_NEAR(lse.data<double>()[i], want_lse[i], 1e-14) << i;

    // f32: the same computation within single-precision rounding.
    Tensor qkv32 = Tensor::empty({N, 3 * D}, DType::kF32);
    fill_uniform(qkv32, 1, -1.5, 1.5);
    Tensor out32 = Tensor::empty({N, D}, DType::kF32);
    Tensor lse32 = Tensor::empty({d.batch, d.heads, d.seq}, DType::kF32);
    ASSERT_TRUE(attention_forward(ctx(), args, qkv32, out32, lse32).ok());
    std::vector<double> qkv_as_f64(qkv32.numel());
    for (int64_t i = 0; i < qkv32.numel(); ++i) qkv_as_f64[i] = qkv32.data<float>()[i];
    naive_attention(args, d.head_dim, qkv_as_f64, &want_out, &want_lse);
    for (int64_t i = 0; i < out32.numel(); ++i)
      EXPECT_NEAR(out32.data<float>()[i], want_out[i], 2e-6) << i;

    // bf16: the f32 computation on the same (bf16-exact) inputs, outputs rounded to bf16, lse f32.
    Tensor qkv16 = Tensor::empty({N, 3 * D}, DType::kBF16);
    for (int64_t i = 0; i < qkv16.numel(); ++i) {
      qkv16.data<bf16>()[i] = bf16(qkv32.data<float>()[i]);
      qkv_as_f64[i] = static_cast<float>(qkv16.data<bf16>()[i]);
    }
    Tensor out16 = Tensor::empty({N, D}, DType::kBF16);
    ASSERT_TRUE(attention_forward(ctx(), args, qkv16, out16, lse32).ok());
    naive_attention(args, d.head_dim, qkv_as_f64, &want_out, &want_lse);
    for (int64_t i = 0; i < out16.numel(); ++i) {
      // One bf16 rounding (relative 2^-8) on top of f32 rounding.
      EXPECT_NEAR(static_cast<float>(out16.data<bf16>()[i]), want_out[i],
                  4e-3 * std::fabs(want_out[i]) + 2e-6)
          << i;
    }
    for (int64_t i = 0; i < lse32.numel(); ++i)
      EXPECT_NEAR(lse32.data<float>()[i], want_lse[i], 2e-6) << i;
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
    Tensor lse = Tensor::empty({d.batch, d.heads, d.seq}, DType::kF64);
    Tensor w = Tensor::empty({N, D}, DType::kF64);
    fill_uniform(w, 6);
    auto loss = [&]() {
      EXPECT_TRUE(attention_forward(ctx(), args, qkv, out, lse).ok());
      return dot(out, w);
    };
    loss();
    Tensor d_qkv = Tensor::empty(qkv.shape(), DType::kF64);
    fill_uniform(d_qkv, 77);  // overwritten, not accumulated
    ASSERT_TRUE(attention_backward(ctx(), args, w, qkv, out, lse, d_qkv).ok());
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

TEST(AttentionTest, LargeScoresStayFiniteAndPositionZeroAttendsToItself) {
  const int64_t B = 2, S = 6, H = 3, Dh = 2, D = H * Dh;
  Tensor qkv = Tensor::empty({B * S, 3 * D}, DType::kF64);
  fill_uniform(qkv, 8, -30, 30);  // large scores: the max subtraction keeps exp finite
  Tensor out = Tensor::empty({B * S, D}, DType::kF64);
  Tensor lse = Tensor::empty({B, H, S}, DType::kF64);
  ASSERT_TRUE(attention_forward(ctx(), {B, S, H, 0.f, {}, 0}, qkv, out, lse).ok());
  for (int64_t i = 0; i < lse.numel(); ++i) ASSERT_TRUE(std::isfinite(lse.data<double>()[i]));
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_TRUE(std::isfinite(out.data<double>()[i]));
  // Position 0 attends only to itself: its output is its own value row, and its lse is its score.
  for (int64_t h = 0; h < H; ++h) {
    double score = 0;
    for (int64_t c = 0; c < Dh; ++c) {
      EXPECT_DOUBLE_EQ(out.data<double>()[h * Dh + c], qkv.data<double>()[2 * D + h * Dh + c]);
      score += qkv.data<double>()[h * Dh + c] * qkv.data<double>()[D + h * Dh + c];
    }
    EXPECT_NEAR(lse.data<double>()[h * S], score / std::sqrt(2.0), 1e-12);
  }
}

TEST(AttentionTest, DropoutMaskIsKeyedByGlobalSequenceNotBatchPosition) {
  const int64_t B = 3, S = 5, H = 2, Dh = 3, D = H * Dh;
  const CounterRng rng{21, make_stream(RngTag::kTest, 4, 2)};
  Tensor qkv = Tensor::empty({B * S, 3 * D}, DType::kF32);
  fill_uniform(qkv, 9);
  Tensor out = Tensor::empty({B * S, D}, DType::kF32);
  Tensor probs = Tensor::empty({B, H, S}, DType::kF32);  // the lse
  ASSERT_TRUE(attention_forward(ctx(), {B, S, H, 0.5f, rng, 40}, qkv, out, probs).ok());
  for (int64_t b = 0; b < B; ++b) {
    Tensor one_out = Tensor::empty({S, D}, DType::kF32);
    Tensor one_probs = Tensor::empty({1, H, S}, DType::kF32);
    ASSERT_TRUE(attention_forward(ctx(), {1, S, H, 0.5f, rng, 40 + b},
                                  qkv.view().rows(b * S, (b + 1) * S), one_out, one_probs)
                    .ok());
    EXPECT_TRUE(moe::testing::bitwise_equal(one_out, out.view().rows(b * S, (b + 1) * S))) << b;
  }
  // The same call again gives the same bits; p = 0 with any stream equals no dropout at all.
  Tensor again = Tensor::empty({B * S, D}, DType::kF32);
  ASSERT_TRUE(attention_forward(ctx(), {B, S, H, 0.5f, rng, 40}, qkv, again, probs).ok());
  EXPECT_TRUE(moe::testing::bitwise_equal(again, out));
  Tensor plain = Tensor::empty({B * S, D}, DType::kF32);
  Tensor zero_p = Tensor::empty({B * S, D}, DType::kF32);
  ASSERT_TRUE(attention_forward(ctx(), {B, S, H, 0.f, {}, 0}, qkv, plain, probs).ok());
  ASSERT_TRUE(attention_forward(ctx(), {B, S, H, 0.f, rng, 40}, qkv, zero_p, probs).ok());
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

TEST(AttentionTest, BadArgumentsAreInvalidArgument) {
  const int64_t B = 2, S = 3, H = 2, D = 4;
  Tensor qkv = Tensor::zeros({B * S, 3 * D}, DType::kF32);
  Tensor out = Tensor::zeros({B * S, D}, DType::kF32);
  Tensor probs = Tensor::zeros({B, H, S}, DType::kF32);  // the lse
  const AttentionArgs ok{B, S, H, 0.f, {}, 0};
  ASSERT_TRUE(attention_forward(ctx(), ok, qkv, out, probs).ok());
  expect_invalid(attention_forward(ctx(), {B, S, 3, 0.f, {}, 0}, qkv, out, probs),
                 "qkv");  // H = 3 does not divide D = 4
  expect_invalid(attention_forward(ctx(), {B, S + 1, H, 0.f, {}, 0}, qkv, out, probs), "qkv");
  expect_invalid(attention_forward(ctx(), {0, S, H, 0.f, {}, 0}, qkv, out, probs), "batch");
  expect_invalid(attention_forward(ctx(), {B, S, H, 1.f, {}, 0}, qkv, out, probs), "dropout");
  expect_invalid(attention_forward(ctx(), {B, S, H, -0.1f, {}, 0}, qkv, out, probs), "dropout");
  Tensor out_bad = Tensor::zeros({B * S, D + 1}, DType::kF32);
  expect_invalid(attention_forward(ctx(), ok, qkv, out_bad, probs), "out");
  Tensor out_f64 = Tensor::zeros({B * S, D}, DType::kF64);
  expect_invalid(attention_forward(ctx(), ok, qkv, out_f64, probs), "out");
  Tensor probs_bad = Tensor::zeros({B, H, S + 1}, DType::kF32);
  expect_invalid(attention_forward(ctx(), ok, qkv, out, probs_bad), "lse");
  expect_invalid(attention_forward(ctx(), ok, qkv, out, Tensor::zeros({B, H, S}, DType::kBF16)),
                 "lse");
  Tensor qkv_i32 = Tensor::zeros({B * S, 3 * D}, DType::kI32);
  expect_invalid(attention_forward(ctx(), ok, qkv_i32, out, probs), "qkv");
  Tensor d_qkv_bad = Tensor::zeros({B * S, 3 * D - 1}, DType::kF32);
  expect_invalid(attention_backward(ctx(), ok, out, qkv, out, probs, d_qkv_bad), "d_qkv");
  Tensor d_qkv = Tensor::zeros({B * S, 3 * D}, DType::kF32);
  expect_invalid(attention_backward(ctx(), ok, out_bad, qkv, out, probs, d_qkv), "d_out");
  expect_invalid(attention_backward(ctx(), ok, out, qkv, out, probs_bad, d_qkv), "lse");
  expect_invalid(attention_backward(ctx(), ok, out, qkv, out_bad, probs, d_qkv), "out");
}

// MOMOE_ATTENTION picks the CUDA path (cuda_attention), whatever the build: bf16 takes the fused
// kernels by default for heads of at most 128 columns and the GEMM path on bf16 operands for
// wider ones; "gemm" and every f32 activation the GEMM path in the compute dtype; any other value
// is the default. The CPU always runs the reference.
TEST(AttentionTest, MomoeAttentionPicksTheCudaPath) {
  using K = CudaAttention;
  const DType bf = DType::kBF16, f32 = DType::kF32;
  struct Case {
    const char* env;
    DType act;
    int64_t head_dim;
    K want;
  };
  for (const Case& c : {Case{nullptr, bf, 64, K::kFused}, Case{"", bf, 128, K::kFused},
                        Case{nullptr, bf, 129, K::kGemmBf16}, Case{nullptr, f32, 64, K::kGemm},
                        Case{"gemm", bf, 64, K::kGemm}, Case{"gemm-bf16", bf, 64, K::kGemmBf16},
                        Case{"gemm-bf16", bf, 256, K::kGemmBf16},
                        Case{"gemm-bf16", f32, 64, K::kGemm}, Case{"fused", bf, 128, K::kFused},
                        Case{"fused", bf, 129, K::kGemmBf16}, Case{"fused", f32, 64, K::kGemm},
                        Case{"flash", bf, 64, K::kFused}, Case{"flash", f32, 64, K::kGemm}}) {
    const testing::ScopedEnv env("MOMOE_ATTENTION", c.env);
    SCOPED_TRACE(
        str_cat(c.env == nullptr ? "(unset)" : c.env, " ", dtype_name(c.act), " Dh ", c.head_dim));
    EXPECT_EQ(cuda_attention(c.act, c.head_dim), c.want);
    EXPECT_STREQ(attention_path(ctx(), c.act, c.head_dim), "cpu");
  }
}

}  // namespace
}  // namespace moe::kernels
