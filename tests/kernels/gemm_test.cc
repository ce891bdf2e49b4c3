#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include "base/rng.h"
#include "tests/testing/gradient_check.h"
#include "tests/testing/scoped_env.h"

namespace moe::kernels {
namespace {

Context& ctx() { return testing::host_context(); }

Tensor random_tensor(Shape shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  CounterRng rng{seed, make_stream(RngTag::kTest, 0, 0)};
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = rng.uniform(i) * 2.0 - 1.0;
  Tensor out = Tensor::empty(shape, dtype);
  EXPECT_TRUE(convert_into(t, out).ok());
  return out;
}

// Oracle: naive triple loop in double.
std::vector<double> naive(const Tensor& a, bool ta, const Tensor& b, bool tb, int64_t m, int64_t n,
                          int64_t k) {
  std::vector<double> c(m * n, 0.0);
  const double* pa = a.data<double>();
  const double* pb = b.data<double>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l)
        c[i * n + j] += (ta ? pa[l * m + i] : pa[i * k + l]) * (tb ? pb[j * k + l] : pb[l * n + j]);
  return c;
}

class GemmTest : public ::testing::TestWithParam<std::tuple<bool, bool, int, int, int>> {};

TEST_P(GemmTest, MatchesNaiveLoop) {
  auto [ta, tb, m, n, k] = GetParam();
  Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, DType::kF64, 1);
  Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, DType::kF64, 2);
  Tensor c = random_tensor({m, n}, DType::kF64, 3);
  std::vector<double> c0 = to_vector<double>(c);
  ASSERT_TRUE(gemm(ctx(), a, ta, b, tb, c, 0.5, 2.0).ok());
  std::vector<double> want = naive(a, ta, b, tb, m, n, k);
  for (int64_t i = 0; i < m * n; ++i)
    EXPECT_NEAR(c.data<double>()[i], 0.5 * want[i] + 2.0 * c0[i], 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(1, 7), ::testing::Values(1, 5),
                                            ::testing::Values(0, 1, 13)));

// The expert product over blocks (dropless offsets, R = 2 ranks x E_l = 3 experts): every block
// multiplies by its expert's weight (b % E_l); block 1 is empty. The weight gradient sums an
// expert's blocks; an expert that received nothing gets no contribution.
TEST(ExpertGemmTest, DroplessBlocksMatchPerBlockProducts) {
  const int64_t k = 6, n = 5;
  ExpertBlocks blocks;
  blocks.ranks = 2;
  blocks.local_experts = 3;
  blocks.offsets = {0, 3, 3, 5, 7, 8, 10};  // rows per block: 3, 0, 2, 2, 1, 2
  Tensor a = random_tensor({10, k}, DType::kF64, 4);
  Tensor w = random_tensor({3, k, n}, DType::kF64, 5);
  Tensor c = Tensor::zeros({10, n}, DType::kF64);
  ASSERT_TRUE(expert_gemm(ctx(), a, w, false, c, blocks).ok());
  for (int64_t b = 0; b < 6; ++b) {
    const int64_t e = b % 3;
    for (int64_t r = blocks.offsets[b]; r < blocks.offsets[b + 1]; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t l = 0; l < k; ++l)
          want += a.data<double>()[r * k + l] * w.data<double>()[(e * k + l) * n + j];
        EXPECT_NEAR(c.data<double>()[r * n + j], want, 1e-12);
      }
    }
  }
  // Transposed weights: w^T [E_l, N, K] gives back the same product.
  Tensor wt = Tensor::empty({3, n, k}, DType::kF64);
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < n; ++j)
        wt.data<double>()[(e * n + j) * k + l] = w.data<double>()[(e * k + l) * n + j];
  Tensor c2 = Tensor::zeros({10, n}, DType::kF64);
  ASSERT_TRUE(expert_gemm(ctx(), a, wt, true, c2, blocks).ok());
  EXPECT_LT(testing::max_abs_diff(c, c2), 1e-12);
  // Weight gradient, accumulated: dw[e] += sum over e's blocks of a^T c.
  Tensor dw = random_tensor({3, k, n}, DType::kF64, 6);
  std::vector<double> dw0 = to_vector<double>(dw);
  ASSERT_TRUE(expert_gemm_wgrad(ctx(), a, c, dw, blocks).ok());
  for (int64_t e = 0; e < 3; ++e) {
    for (int64_t l = 0; l < k; ++l) {
      for (int64_t j = 0; j < n; ++j) {
        double want = dw0[(e * k + l) * n + j];
        for (int64_t b = e; b < 6; b += 3)
          for (int64_t r = blocks.offsets[b]; r < blocks.offsets[b + 1]; ++r)
            want += a.data<double>()[r * k + l] * c.data<double>()[r * n + j];
        EXPECT_NEAR(dw.data<double>()[(e * k + l) * n + j], want, 1e-12);
      }
    }
  }
}

// MOMOE_EXPERT_GEMM picks how a GPU runs a group of dropless expert products (expert_gemm_path),
// whatever the build: one cuBLAS call per block unless "grouped" asks for the grouped call; any
// other value is the default.
TEST(ExpertGemmTest, MomoeExpertGemmPicksTheCudaPath) {
  using P = ExpertGemmPath;
  const std::pair<const char*, P> cases[] = {{nullptr, P::kLoop},   {"", P::kLoop},
                                             {"loop", P::kLoop},    {"grouped", P::kGrouped},
                                             {"Grouped", P::kLoop}, {"batched", P::kLoop}};
  for (const auto& [env, want] : cases) {
    const testing::ScopedEnv path("MOMOE_EXPERT_GEMM", env);
    SCOPED_TRACE(env == nullptr ? "(unset)" : env);
    EXPECT_EQ(expert_gemm_path(), want);
  }
  EXPECT_STREQ(expert_gemm_path_name(P::kLoop), "loop");
  EXPECT_STREQ(expert_gemm_path_name(P::kGrouped), "grouped");
}

// Capacity blocks: padding rows (past each block's filled prefix) are zero in the output and
// never reach the weight gradient, whatever their input holds.
TEST(ExpertGemmTest, CapacityBlocksSkipPadding) {
  const int64_t k = 3, n = 2, c = 4;
  ExpertBlocks blocks;
  blocks.ranks = 2;
  blocks.local_experts = 2;
  blocks.capacity = c;
  Tensor filled = Tensor::from_vector<int32_t>({4}, {4, 0, 2, 1});
  blocks.filled = filled;
  Tensor a = random_tensor({16, k}, DType::kF64, 7);
  Tensor w = random_tensor({2, k, n}, DType::kF64, 8);
  Tensor y = random_tensor({16, n}, DType::kF64, 9);  // garbage everywhere before the call
  ASSERT_TRUE(expert_gemm(ctx(), a, w, false, y, blocks).ok());
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t i = 0; i < c; ++i) {
      const int64_t r = b * c + i;
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        if (i < filled.data<int32_t>()[b]) {
          for (int64_t l = 0; l < k; ++l)
            want += a.data<double>()[r * k + l] * w.data<double>()[((b % 2) * k + l) * n + j];
        }
        EXPECT_NEAR(y.data<double>()[r * n + j], want, 1e-12) << "block " << b << " row " << i;
      }
    }
  }
  Tensor dw = Tensor::zeros({2, k, n}, DType::kF64);
  Tensor dy = random_tensor({16, n}, DType::kF64, 10);
  ASSERT_TRUE(expert_gemm_wgrad(ctx(), a, dy, dw, blocks).ok());
  double want = 0;  // expert 1, element (0, 0): block 1 (empty) and block 3 (one row)
  want += a.data<double>()[12 * k] * dy.data<double>()[12 * n];
  EXPECT_NEAR(dw.data<double>()[k * n], want, 1e-12);
}

// bf16 operands: the product of bf16-exact values with f32 accumulation, rounded once to bf16, or
// kept in f32 (a weight gradient into an fp32 gradient).
TEST(GemmTest, Bf16OperandsWithF32Accumulation) {
  const int64_t m = 3, kk = 5, n = 4;
  Tensor a = Tensor::empty({m, kk}, DType::kBF16), b = Tensor::empty({kk, n}, DType::kBF16);
  std::vector<double> av(m * kk), bv(kk * n);
  for (int64_t i = 0; i < m * kk; ++i) {
    av[i] = static_cast<double>(static_cast<int>(i % 7) - 3) / 8;  // exact in bf16
    a.data<bf16>()[i] = bf16(static_cast<float>(av[i]));
  }
  for (int64_t i = 0; i < kk * n; ++i) {
    bv[i] = static_cast<double>(static_cast<int>(i % 5) - 2) / 4;
    b.data<bf16>()[i] = bf16(static_cast<float>(bv[i]));
  }
  Tensor c32 = Tensor::zeros({m, n}, DType::kF32), c16 = Tensor::empty({m, n}, DType::kBF16);
  ASSERT_TRUE(gemm(ctx(), a, false, b, false, c32, 1.0, 1.0).ok());
  ASSERT_TRUE(gemm(ctx(), a, false, b, false, c16).ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (int64_t l = 0; l < kk; ++l) want += av[i * kk + l] * bv[l * n + j];
      EXPECT_EQ(c32.data<float>()[i * n + j], static_cast<float>(want));  // exact: small sums
      EXPECT_EQ(static_cast<float>(c16.data<bf16>()[i * n + j]),
                static_cast<float>(bf16(static_cast<float>(want))));
    }
  }
  // f32 output needs bf16 operands; an f64 output for bf16 operands is refused.
  EXPECT_EQ(gemm(ctx(), a, false, b, false, Tensor::zeros({m, n}, DType::kF64)).code(),
            StatusCode::kInvalidArgument);
}

TEST(GemmTest, RejectsBadShapesAndDtypes) {
  Tensor a = Tensor::zeros({2, 3}, DType::kF32);
  Tensor b = Tensor::zeros({4, 5}, DType::kF32);
  Tensor c = Tensor::zeros({2, 5}, DType::kF32);
  EXPECT_EQ(gemm(ctx(), a, false, b, false, c).code(), StatusCode::kInvalidArgument);
  Tensor bi = Tensor::zeros({3, 5}, DType::kI32);
  EXPECT_EQ(gemm(ctx(), a, false, bi, false, c).code(), StatusCode::kInvalidArgument);
  Tensor b3 = Tensor::zeros({2, 3, 5}, DType::kF32);
  ExpertBlocks one;
  one.local_experts = 2;
  one.offsets = {0, 1};  // one block for two experts
  EXPECT_EQ(expert_gemm(ctx(), a, b3, false, c, one).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::kernels
