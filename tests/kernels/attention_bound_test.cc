// The error bound that the fused GPU attention is checked under (tests/testing/attention_bound.h),
// checked on the host: (1) an emulation of its rounding model (the first fused kernels'
// arithmetic: bf16 roundings of the probabilities and the score gradients, f32 elsewhere, D_i
// from P and dP; the present kernels themselves run in flash_attention_emulation_test) lies
// inside it, and so does its
// variant with the row sums and D_i in double (the GEMM path on bf16 operands,
// kernels/cuda/attention_bf16.cu), so a GPU window that fails the bound has found a kernel bug,
// not a bound that was too tight; (2) the CPU reference's
// bf16 path lies inside it; (3) it is not loose: small against the values, and an error of twice
// the bound at one entry fails it, so does the emulation with a planted bug (the diagonal key
// left out), and the emulation's worst error reaches a quarter of it (the bound is made of
// roundings that do happen).
#include "tests/testing/attention_bound.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu/attention_ref.h"
#include "tests/testing/gradient_check.h"

namespace moe::kernels {
namespace {

using testing::AttentionWithBound;
using testing::within_bound;

struct Case {
  int64_t batch, seq, heads, head_dim;
  float dropout;
};

std::string name(const Case& c) {
  return str_cat("B", c.batch, "_S", c.seq, "_H", c.heads, "_Dh", c.head_dim, "_p",
                 static_cast<int>(c.dropout * 100));
}

float round_bf16(float x) { return static_cast<float>(bf16(x)); }

// The bound's rounding model in f32 on the host (the first fused kernels' arithmetic; the present
// ones, whose forward is one pass with rescaling, run through the warp emulator in
// flash_attention_emulation_test), sums in index order: P = exp(s - lse) times the dropout
// scale, rounded to bf16, before O = P V; dS = P (m dP - D) rounded to bf16 before dQ and dK;
// P m rounded to bf16 before dV. With sums_in_double, the softmax row sum and D_i add in double,
// as attention_bf16.cu's row kernels do (its products are cuBLAS's: f32 accumulation in another
// order, which the bound's per-operation model covers as it covers the tensor cores').
struct FusedEmulation {
  const AttentionArgs& a;
  int64_t dh, D;
  const bf16* qkv;
  const bf16* dout;
  float scale, inv_keep;
  bool planted_bug = false;     // drops the diagonal from O (a kernel's off-by-one at j == i)
  bool sums_in_double = false;  // the row sum and D_i in double (attention_bf16.cu)

  float q(int64_t b, int64_t h, int64_t i, int64_t c, int part) const {
    return qkv[(b * a.seq_len + i) * 3 * D + part * D + h * dh + c];
  }
  float mask(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (a.dropout == 0.f) return 1.f;
    return ref::attention_keep(a, b, h, i, j) ? inv_keep : 0.f;
  }
  // Row i's scaled scores s_ij (j <= i) and P_ij (f32, before rounding), and lse_i.
  float row(int64_t b, int64_t h, int64_t i, std::vector<float>* s, std::vector<float>* p) const {
    float mx = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      float dot = 0.f;
      for (int64_t c = 0; c < dh; ++c) dot += q(b, h, i, c, 0) * q(b, h, j, c, 1);
      (*s)[j] = dot * scale;
      mx = std::fmax(mx, (*s)[j]);
    }
    float l = 0.f;
    double l_double = 0;
    for (int64_t j = 0; j <= i; ++j) {
      l += std::exp((*s)[j] - mx);
      l_double += std::exp((*s)[j] - mx);
    }
    const float lse =
        sums_in_double ? static_cast<float>(mx + std::log(l_double)) : mx + std::log(l);
    for (int64_t j = 0; j <= i; ++j) (*p)[j] = std::exp((*s)[j] - lse);
    return lse;
  }

  void run(bf16* out, float* lse, bf16* d_qkv) const {
    const int64_t S = a.seq_len;
    std::vector<float> s(S), p(S), dsum(S);
    std::vector<float> ds(S * S), pm(S * S);  // one head's dS and P m (bf16-rounded)
    for (int64_t b = 0; b < a.batch; ++b) {
      for (int64_t h = 0; h < a.heads; ++h) {
        std::fill(ds.begin(), ds.end(), 0.f);
        std::fill(pm.begin(), pm.end(), 0.f);
        for (int64_t i = 0; i < S; ++i) {
          lse[(b * a.heads + h) * S + i] = row(b, h, i, &s, &p);
          float d_i = 0.f;
          double d_double = 0;
          std::vector<float> g(i + 1);
          for (int64_t j = 0; j <= i; ++j) {
            float dp = 0.f;
            for (int64_t c = 0; c < dh; ++c) {
              dp += static_cast<float>(dout[(b * S + i) * D + h * dh + c]) * q(b, h, j, c, 2);
            }
            g[j] = dp * mask(b, h, i, j);
            d_i += p[j] * g[j];
            d_double += static_cast<double>(p[j]) * g[j];
            pm[i * S + j] = round_bf16(p[j] * mask(b, h, i, j));
          }
          if (sums_in_double) d_i = static_cast<float>(d_double);
          for (int64_t j = 0; j <= i; ++j) ds[i * S + j] = round_bf16(p[j] * (g[j] - d_i));
          for (int64_t c = 0; c < dh; ++c) {
            float o = 0.f;
            for (int64_t j = 0; j <= i - (planted_bug ? 1 : 0); ++j) {
              o += pm[i * S + j] * q(b, h, j, c, 2);
            }
            out[(b * S + i) * D + h * dh + c] = bf16(o);
          }
        }
        for (int64_t x = 0; x < S; ++x) {
          for (int64_t c = 0; c < dh; ++c) {
            float dq = 0.f, dk = 0.f, dv = 0.f;
            for (int64_t j = 0; j <= x; ++j) dq += ds[x * S + j] * q(b, h, j, c, 1);
            for (int64_t i = x; i < S; ++i) {
              dk += ds[i * S + x] * q(b, h, i, c, 0);
              dv += pm[i * S + x] * static_cast<float>(dout[(b * S + i) * D + h * dh + c]);
            }
            bf16* row_out = d_qkv + (b * S + x) * 3 * D + h * dh + c;
            row_out[0] = bf16(dq * scale);
            row_out[D] = bf16(dk * scale);
            row_out[2 * D] = bf16(dv);
          }
        }
      }
    }
  }
};

// Which emulation: the fused kernels' sums or attention_bf16.cu's, with or without the bug.
struct Variant {
  bool sums_in_double = false;
  bool planted_bug = false;
};

// Fills out, lse and d_qkv from the emulation.
void emulate(const AttentionArgs& a, const Case& c, const Tensor& qkv, const Tensor& dout,
             Variant v, Tensor* out, Tensor* lse, Tensor* d_qkv) {
  const int64_t rows = c.batch * c.seq, d = c.heads * c.head_dim;
  *out = Tensor::empty({rows, d}, DType::kBF16);
  *lse = Tensor::empty({c.batch, c.heads, c.seq}, DType::kF32);
  *d_qkv = Tensor::empty({rows, 3 * d}, DType::kBF16);
  FusedEmulation fused{a,
                       c.head_dim,
                       d,
                       qkv.data<bf16>(),
                       dout.data<bf16>(),
                       static_cast<float>(1.0 / std::sqrt(double(c.head_dim))),
                       static_cast<float>(1.0 / (1.0 - double(c.dropout)))};
  fused.planted_bug = v.planted_bug;
  fused.sums_in_double = v.sums_in_double;
  fused.run(out->data<bf16>(), lse->data<float>(), d_qkv->data<bf16>());
}

class AttentionBound : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case c = GetParam();
    a_ = AttentionArgs{
        c.batch, c.seq, c.heads, c.dropout, CounterRng{9, make_stream(RngTag::kDropout, 3, 2)}, 5};
    const int64_t rows = c.batch * c.seq, d = c.heads * c.head_dim;
    qkv_ = Tensor::empty({rows, 3 * d}, DType::kBF16);
    dout_ = Tensor::empty({rows, d}, DType::kBF16);
    testing::fill_uniform(qkv_, 11, -1.5, 1.5);
    testing::fill_uniform(dout_, 12);
    exact_ = testing::exact_attention(a_, qkv_, dout_);
  }
  AttentionArgs a_;
  Tensor qkv_, dout_;
  AttentionWithBound exact_;
};

TEST_P(AttentionBound, Bf16RoundingArithmeticAndReferenceAreInsideTheBound) {
  const Case c = GetParam();
  Tensor out, lse, d_qkv;
  for (const bool sums_in_double : {false, true}) {
    SCOPED_TRACE(sums_in_double ? "gemm-bf16 (sums in double)" : "fused");
    emulate(a_, c, qkv_, dout_, Variant{sums_in_double, /*planted_bug=*/false}, &out, &lse, &d_qkv);
    EXPECT_TRUE(within_bound("emulated out", out, exact_.out, exact_.out_bound));
    EXPECT_TRUE(within_bound("emulated lse", lse, exact_.lse, exact_.lse_bound));
    EXPECT_TRUE(within_bound("emulated d_qkv", d_qkv, exact_.d_qkv, exact_.d_qkv_bound));
    if (c.seq > 1) {  // one position: P = 1 and dS = 0, both exact
      // Not loose: the bf16 roundings the bound is made of reach a quarter of it somewhere.
      EXPECT_GT(testing::worst_error_over_bound(out, exact_.out, exact_.out_bound), 0.25);
      for (int part = 0; part < 3; ++part) {  // dq, dk, dv: each part's own terms
        EXPECT_GT(
            testing::worst_part_error_over_bound(d_qkv, exact_.d_qkv, exact_.d_qkv_bound, part),
            0.1)
            << "d_qkv part " << part;
      }
    }
  }

  Context& ctx = testing::host_context();
  ASSERT_TRUE(attention_forward(ctx, a_, qkv_, out, lse).ok());
  ASSERT_TRUE(attention_backward(ctx, a_, dout_, qkv_, out, lse, d_qkv).ok());
  EXPECT_TRUE(within_bound("reference out", out, exact_.out, exact_.out_bound));
  EXPECT_TRUE(within_bound("reference lse", lse, exact_.lse, exact_.lse_bound));
  EXPECT_TRUE(within_bound("reference d_qkv", d_qkv, exact_.d_qkv, exact_.d_qkv_bound));
}

TEST_P(AttentionBound, IsTightEnoughToCatchAnError) {
  // Each bound is a few bf16 roundings of the values it bounds, never of order 1.
  EXPECT_LT(testing::relative_bound(exact_.out, exact_.out_bound), 0.1);
  EXPECT_LT(testing::relative_bound(exact_.d_qkv, exact_.d_qkv_bound), 0.1);
  EXPECT_LT(testing::relative_bound(exact_.lse, exact_.lse_bound), 1e-3);
  // The exact values pass; one entry off by twice its bound fails.
  Tensor out = Tensor::from_vector<double>({static_cast<int64_t>(exact_.out.size())}, exact_.out);
  EXPECT_TRUE(within_bound("exact", out, exact_.out, exact_.out_bound));
  const size_t at = exact_.out.size() / 2;
  out.data<double>()[at] += 2 * exact_.out_bound[at];
  EXPECT_FALSE(within_bound("perturbed", out, exact_.out, exact_.out_bound));
  // A kernel that leaves out the diagonal key fails (past the first position).
  if (GetParam().seq > 1) {
    Tensor bad_out, bad_lse, bad_dqkv;
    emulate(a_, GetParam(), qkv_, dout_, Variant{/*sums_in_double=*/false, /*planted_bug=*/true},
            &bad_out, &bad_lse, &bad_dqkv);
    EXPECT_FALSE(within_bound("planted bug", bad_out, exact_.out, exact_.out_bound));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBound,
                         ::testing::Values(Case{1, 1, 1, 4, 0.f}, Case{2, 37, 3, 8, 0.f},
                                           Case{3, 64, 2, 16, 0.1f}, Case{1, 130, 2, 5, 0.25f},
                                           Case{1, 150, 1, 64, 0.f}, Case{1, 70, 1, 128, 0.1f}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return name(info.param);
                         });

}  // namespace
}  // namespace moe::kernels
