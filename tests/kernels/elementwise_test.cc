// Elementwise helpers (kernels/elementwise.h) against hand values, including aliasing, and their
// argument errors.
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace moe::kernels {
namespace {

void expect_invalid(const Status& s, const std::string& needle) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

TEST(ElementwiseTest, AddAxpyScaleCopy) {
  Tensor a = Tensor::from_vector<double>({2, 2}, {1, 2, 3, 4});
  Tensor b = Tensor::from_vector<double>({2, 2}, {10, 20, 30, 40});
  Tensor out = Tensor::empty({2, 2}, DType::kF64);
  ASSERT_TRUE(add(a, b, out).ok());
  EXPECT_EQ(to_vector<double>(out), (std::vector<double>{11, 22, 33, 44}));
  ASSERT_TRUE(add(a, b, a).ok());  // out aliases a
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{11, 22, 33, 44}));
  ASSERT_TRUE(axpy(-0.5, b, a).ok());
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{6, 12, 18, 24}));
  ASSERT_TRUE(scale_inplace(a, 0.25).ok());
  EXPECT_EQ(to_vector<double>(a), (std::vector<double>{1.5, 3, 4.5, 6}));
  Tensor f = Tensor::from_vector<float>({3}, {1.5f, -2.f, 0.f});
  Tensor f2 = Tensor::from_vector<float>({3}, {1.f, 1.f, 1.f});
  ASSERT_TRUE(axpy(2.0, f, f2).ok());
  EXPECT_EQ(to_vector<float>(f2), (std::vector<float>{4.f, -3.f, 1.f}));
  Tensor ids = Tensor::from_vector<int32_t>({3}, {7, 8, 9});
  Tensor ids_copy = Tensor::zeros({3}, DType::kI32);
  ASSERT_TRUE(copy(ids, ids_copy).ok());
  EXPECT_EQ(to_vector<int32_t>(ids_copy), (std::vector<int32_t>{7, 8, 9}));
}

TEST(ElementwiseTest, AllFinite) {
  Tensor ok = Tensor::from_vector<float>({2}, {1.f, -1e30f});
  EXPECT_TRUE(*all_finite(ok));
  EXPECT_FALSE(*all_finite(Tensor::from_vector<double>({2}, {1.0, std::nan("")})));
  EXPECT_FALSE(
      *all_finite(Tensor::from_vector<float>({1}, {std::numeric_limits<float>::infinity()})));
  EXPECT_TRUE(*all_finite(Tensor::zeros({0}, DType::kF64)));
}

TEST(ElementwiseTest, BadArgumentsAreInvalidArgument) {
  Tensor a = Tensor::zeros({2, 3}, DType::kF32);
  expect_invalid(add(a, Tensor::zeros({3, 2}, DType::kF32), a), "b");
  expect_invalid(add(a, a, Tensor::zeros({2, 3}, DType::kF64)), "out");
  expect_invalid(add(Tensor::zeros({2, 3}, DType::kI32), a, a), "a");
  expect_invalid(axpy(1.0, a, Tensor::zeros({6}, DType::kF32)), "y");
  expect_invalid(scale_inplace(Tensor::zeros({2}, DType::kI64), 2.0), "x");
  expect_invalid(copy(a, Tensor::zeros({2, 3}, DType::kF64)), "dst");
  expect_invalid(all_finite(Tensor::zeros({2}, DType::kI32)).status(), "x");
}

}  // namespace
}  // namespace moe::kernels
