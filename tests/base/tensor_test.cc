#include "core/base/tensor.h"

#include <gtest/gtest.h>

namespace moe {
namespace {

TEST(TensorTest, ShapeAndViews) {
  Tensor t = Tensor::zeros({3, 4}, DType::kF32);
  EXPECT_EQ(t.numel(), 12);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.view().to_string(), "f32[3, 4]@host");
  float* p = t.data<float>();
  for (int i = 0; i < 12; ++i) p[i] = static_cast<float>(i);
  TensorView r = t.view().rows(1, 3);
  EXPECT_EQ(r.shape(), (Shape{2, 4}));
  EXPECT_EQ(r.data<float>()[0], 4.0f);
  EXPECT_EQ(t.view()[2].data<float>()[3], 11.0f);
  EXPECT_EQ(t.view().reshape({12}).dim(0), 12);
}

TEST(TensorTest, MoveTransfersOwnership) {
  Tensor a = Tensor::from_vector<int32_t>({2}, {7, 9});
  Tensor b = std::move(a);
  EXPECT_EQ(to_vector<int32_t>(b), (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(a.numel(), 0);
}

TEST(TensorTest, CopyFromChecksShape) {
  Tensor a = Tensor::zeros({2, 2}, DType::kF32);
  Tensor b = Tensor::zeros({4}, DType::kF32);
  EXPECT_EQ(a.copy_from(b).code(), StatusCode::kInvalidArgument);
}

TEST(TensorTest, ConvertRoundsToBf16) {
  Tensor src = Tensor::from_vector<float>({3}, {1.0f, 1.00390625f, -2.5f});
  Tensor dst = Tensor::empty({3}, DType::kBF16);
  ASSERT_TRUE(convert_into(src, dst).ok());
  Tensor back = Tensor::empty({3}, DType::kF64);
  ASSERT_TRUE(convert_into(dst, back).ok());
  // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: round to even gives 1.
  EXPECT_EQ(to_vector<double>(back), (std::vector<double>{1.0, 1.0, -2.5}));
}

TEST(TensorDeathTest, WrongTypedAccessAborts) {
  Tensor t = Tensor::zeros({2}, DType::kF32);
  EXPECT_DEATH(t.data<double>(), "read as f64");
}

TEST(DeviceTest, NoGpuMeansZeroDevices) {
  // On CI (no GPU) the count must be 0, never an error; on a GPU machine it is positive.
  EXPECT_GE(cuda_device_count(), 0);
}

}  // namespace
}  // namespace moe
