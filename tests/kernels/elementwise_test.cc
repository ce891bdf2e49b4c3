// Elementwise helpers (kernels/elementwise.h) against hand values, including aliasing, dtype
// conversion and mixed-dtype accumulation, and their argument errors.
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

using moe::testing::expect_invalid;

Context& ctx() { return testing::host_context(); }

TEST(ElementwiseTest, AddAxpyScaleConvert) {
  Tensor a = Tensor::from_vector<double>({2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::from_vector<double>({2, 2}, {10, 20, 30, 40});
  Tensor out = Tensor::empty({2, 2}, DType::kF64);
  ASSERT_TRUE(add(ctx(), a, b, out).ok());
  EXPECT_EQ(to_vector<double>(out), (std::vector<double>{11, 22, 33, 44}));
  ASSERT_TRUE(add(ctx(), a, b, a).ok());  // out aliases a
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{11, 22, 33, 44}));
  ASSERT_TRUE(axpy(ctx(), -0.5, b, a).ok());
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{6, 12, 18, 24}));
  ASSERT_TRUE(scale(ctx(), a, 0.25).ok());
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{1.5, 3, 4.5, 6}));
  Tensor f = Tensor::from_vector<float>({3}, {1.5f, -2.f, 0.f});
  Tensor f2 = Tensor::from_vector<float>({3}, {1.f, 1.f, 1.f});
  ASSERT_TRUE(axpy(ctx(), 2.0, f, f2).ok());
  EXPECT_EQ(to_vector<float>(f2), (std::vector<float>{4.f, -3.f, 1.f}));
  Tensor ids = Tensor::from_vector<int32_t>({3}, {7, 8, 9});
  Tensor ids_copy = Tensor::zeros({3}, DType::kI32);
  ASSERT_TRUE(convert(ctx(), ids, ids_copy).ok());
  EXPECT_EQ(to_vector<int32_t>(ids_copy), (std::vector<int32_t>{7, 8, 9}));
}

// bf16 round to nearest even: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 and rounds to even (1);
// 1 + 3 * 2^-9 rounds up. An f32 gradient accumulates into a bf16 one in double, rounded once.
TEST(ElementwiseTest, Bf16ConversionAndMixedAxpy) {
  Tensor f = Tensor::from_vector<float>({4}, {1.f + 1.f / 256, 1.f + 3.f / 512, -2.5f, 1e-3f});
  Tensor b = Tensor::empty({4}, DType::kBF16);
  ASSERT_TRUE(convert(ctx(), f, b).ok());
  const bf16* pb = b.data<bf16>();
  EXPECT_EQ(static_cast<float>(pb[0]), 1.f);
  EXPECT_EQ(static_cast<float>(pb[1]), 1.f + 1.f / 128);
  EXPECT_EQ(static_cast<float>(pb[2]), -2.5f);
  EXPECT_NEAR(static_cast<float>(pb[3]), 1e-3f, 1e-5f);
  Tensor back = Tensor::empty({4}, DType::kF32);
  ASSERT_TRUE(convert(ctx(), b, back).ok());
  EXPECT_EQ(to_vector<float>(back)[2], -2.5f);
  // y (bf16) += 0.5 * x (f32): 1 + 0.5 * (1/128) = 1 + 1/256 -> ties to even (1).
  Tensor y = Tensor::empty({1}, DType::kBF16);
  y.data<bf16>()[0] = bf16(1.f);
  ASSERT_TRUE(axpy(ctx(), 0.5, Tensor::from_vector<float>({1}, {1.f / 128}), y).ok());
  EXPECT_EQ(static_cast<float>(y.data<bf16>()[0]), 1.f);
}

TEST(ElementwiseTest, CountNonfiniteAndAddScalar) {
  Tensor out = Tensor::zeros({1}, DType::kF64);
  ASSERT_TRUE(count_nonfinite(ctx(), Tensor::from_vector<float>({2}, {1.f, -1e30f}), out).ok());
  EXPECT_EQ(out.data<double>()[0], 0);
  ASSERT_TRUE(
      count_nonfinite(ctx(), Tensor::from_vector<double>({2}, {1.0, std::nan("")}), out).ok());
  ASSERT_TRUE(
      count_nonfinite(
          ctx(), Tensor::from_vector<float>({1}, {std::numeric_limits<float>::infinity()}), out)
          .ok());
  EXPECT_EQ(out.data<double>()[0], 2);  // accumulated
  ASSERT_TRUE(add_scalar(ctx(), out, 0.5).ok());
  EXPECT_EQ(out.data<double>()[0], 2.5);
}

// A column block between matrices: q [3, 2] gathered from a packed [3, 6] (columns 2..3), doubled
// and scattered back to columns 4..5; the other columns stay.
TEST(ElementwiseTest, CopyColumnsGathersAndScatters) {
  Tensor packed = Tensor::empty({3, 6}, DType::kF64);
  for (int i = 0; i < 18; ++i) packed.data<double>()[i] = i;
  Tensor block = Tensor::zeros({3, 2}, DType::kF64);
  ASSERT_TRUE(copy_columns(ctx(), packed, 2, block, 0, 2).ok());
  const double want[] = {2, 3, 8, 9, 14, 15};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(block.data<double>()[i], want[i]) << i;
  ASSERT_TRUE(scale(ctx(), block, 2.0).ok());
  ASSERT_TRUE(copy_columns(ctx(), block, 0, packed, 4, 2).ok());
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 6; ++c) {
      const double v = packed.data<double>()[r * 6 + c];
      EXPECT_EQ(v, c >= 4 ? 2.0 * (r * 6 + c - 2) : r * 6 + c) << r << ", " << c;
    }
  }
  ASSERT_TRUE(copy_columns(ctx(), packed, 6, block, 0, 0).ok());  // an empty block
}

TEST(ElementwiseTest, BadArgumentsAreInvalidArgument) {
  Tensor a = Tensor::zeros({2, 3}, DType::kF32);
  expect_invalid(add(ctx(), a, Tensor::zeros({3, 2}, DType::kF32), a), "b");
  expect_invalid(add(ctx(), a, a, Tensor::zeros({2, 3}, DType::kF64)), "out");
  expect_invalid(add(ctx(), Tensor::zeros({2, 3}, DType::kI32), a, a), "a");
  expect_invalid(axpy(ctx(), 1.0, a, Tensor::zeros({6}, DType::kF32)), "y");
  expect_invalid(scale(ctx(), Tensor::zeros({2}, DType::kI64), 2.0), "x");
  expect_invalid(convert(ctx(), a, Tensor::zeros({2, 3}, DType::kI32)), "conversion");
  expect_invalid(convert(ctx(), a, Tensor::zeros({6}, DType::kF64)), "dst");
  expect_invalid(
      count_nonfinite(ctx(), Tensor::zeros({2}, DType::kI32), Tensor::zeros({1}, DType::kF64)),
      "x");
  expect_invalid(add_scalar(ctx(), Tensor::zeros({1}, DType::kF32), 1.0), "out");
  Tensor wide = Tensor::zeros({2, 6}, DType::kF32);
  expect_invalid(copy_columns(ctx(), wide, 4, a, 0, 3), "out of range");
  expect_invalid(copy_columns(ctx(), wide, 0, a, 1, 3), "out of range");
  expect_invalid(copy_columns(ctx(), wide, 0, Tensor::zeros({3, 3}, DType::kF32), 0, 3), "rows");
  expect_invalid(copy_columns(ctx(), wide, 0, Tensor::zeros({2, 3}, DType::kF64), 0, 3), "dtype");
  expect_invalid(copy_columns(ctx(), wide, 0, wide, 3, 3), "must not be src");
}

}  // namespace
}  // namespace moe::kernels
