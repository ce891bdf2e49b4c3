#include "kernels/gemm.h"

#include <gtest/gtest.h>

#include "core/base/rng.h"

namespace moe::kernels {
namespace {

Tensor random_tensor(Shape shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF64);
  CounterRng rng{seed, make_stream(RngTag::kTest, 0, 0)};
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = rng.uniform(i) * 2.0 - 1.0;
  Tensor out = Tensor::empty(shape, dtype);
  EXPECT_TRUE(convert_into(t, out).ok());
  return out;
}

// Oracle: naive triple loop in double.
std::vector<double> naive(const Tensor& a, bool ta, const Tensor& b, bool tb, int64_t m,
                          int64_t n, int64_t k) {
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
  ASSERT_TRUE(gemm(a, ta, b, tb, c, 0.5, 2.0).ok());
  std::vector<double> want = naive(a, ta, b, tb, m, n, k);
  for (int64_t i = 0; i < m * n; ++i) EXPECT_NEAR(c.data<double>()[i], 0.5 * want[i] + 2.0 * c0[i], 1e-12);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(1, 7), ::testing::Values(1, 5),
                                            ::testing::Values(0, 1, 13)));

TEST(GroupedGemmTest, MatchesPerGroupProducts) {
  const int64_t k = 6, n = 5;
  std::vector<int64_t> offsets = {0, 3, 3, 10};  // group 1 is empty
  Tensor a = random_tensor({10, k}, DType::kF64, 4);
  Tensor b = random_tensor({3, k, n}, DType::kF64, 5);
  Tensor c = Tensor::zeros({10, n}, DType::kF64);
  ASSERT_TRUE(grouped_gemm(a, b, false, c, offsets).ok());
  for (int g = 0; g < 3; ++g) {
    for (int64_t r = offsets[g]; r < offsets[g + 1]; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t l = 0; l < k; ++l)
          want += a.data<double>()[r * k + l] * b.data<double>()[(g * k + l) * n + j];
        EXPECT_NEAR(c.data<double>()[r * n + j], want, 1e-12);
      }
    }
  }
  // Weight gradient: c2[g] = a[g]^T c[g]; the empty group gives zeros.
  Tensor w = random_tensor({3, k, n}, DType::kF64, 6);
  ASSERT_TRUE(grouped_gemm_wgrad(a, c, w, offsets).ok());
  for (int64_t i = 0; i < k * n; ++i) EXPECT_EQ(w.data<double>()[k * n + i], 0.0);
  double want = 0;
  for (int64_t r = 0; r < 3; ++r) want += a.data<double>()[r * k + 2] * c.data<double>()[r * n + 4];
  EXPECT_NEAR(w.data<double>()[2 * n + 4], want, 1e-12);
}

TEST(GemmTest, RejectsBadShapesAndDtypes) {
  Tensor a = Tensor::zeros({2, 3}, DType::kF32);
  Tensor b = Tensor::zeros({4, 5}, DType::kF32);
  Tensor c = Tensor::zeros({2, 5}, DType::kF32);
  EXPECT_EQ(gemm(a, false, b, false, c).code(), StatusCode::kInvalidArgument);
  Tensor bi = Tensor::zeros({3, 5}, DType::kI32);
  EXPECT_EQ(gemm(a, false, bi, false, c).code(), StatusCode::kInvalidArgument);
  Tensor b3 = Tensor::zeros({2, 3, 5}, DType::kF32);
  EXPECT_EQ(grouped_gemm(a, b3, false, c, {0, 1}).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::kernels
