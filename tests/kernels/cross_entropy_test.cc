// Softmax cross-entropy (kernels/cross_entropy.h): known values (uniform logits give log V, a
// hand-computed V = 3 row), stability for huge logits, ignored targets, the saved lse and per-row
// losses, the backward against the closed form and central finite differences in f64 (in place
// too, f32 included), and argument errors.
#include "kernels/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/testing/gradient_check.h"
#include "tests/testing/status_expect.h"

namespace moe::kernels {
namespace {

using moe::testing::check_gradients;
using moe::testing::expect_invalid;
using moe::testing::fill_uniform;

Context& ctx() { return testing::host_context(); }

struct CrossEntropyResult {
  double loss_sum = 0;
  int64_t count = 0;
  double mean() const { return count > 0 ? loss_sum / static_cast<double>(count) : 0.0; }
};

// The forward with fresh device sums (and an lse scratch when none is given), read back.
StatusOr<CrossEntropyResult> ce_forward(const TensorView& logits, const TensorView& targets,
                                        const TensorView& lse = {}, const TensorView& rows = {}) {
  Tensor scratch = logits.ndim() == 2 && dtype_is_floating(logits.dtype())
                       ? Tensor::empty({logits.dim(0)}, logits.dtype())
                       : Tensor::empty({0}, DType::kF32);
  Tensor sums = Tensor::zeros({2}, DType::kF64);
  MOE_RETURN_IF_ERROR(cross_entropy_forward(ctx(), logits, targets,
                                            lse.numel() > 0 ? lse : scratch.view(), sums, rows));
  return CrossEntropyResult{sums.data<double>()[0], static_cast<int64_t>(sums.data<double>()[1])};
}

TEST(CrossEntropyTest, UniformLogitsGiveLogV) {
  for (int64_t v : {1, 3, 7, 50}) {
    for (DType dt : {DType::kF64, DType::kF32}) {
      Tensor logits = Tensor::zeros({4, v}, dt);
      if (dt == DType::kF64) {
        for (int64_t i = 0; i < logits.numel(); ++i) logits.data<double>()[i] = 2.5;
      }
      Tensor targets = Tensor::from_vector<int32_t>({4}, {0, static_cast<int32_t>(v - 1), -1, 0});
      StatusOr<CrossEntropyResult> r = ce_forward(logits, targets);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      EXPECT_EQ(r->count, 3);
      EXPECT_NEAR(r->loss_sum, 3 * std::log(static_cast<double>(v)), 1e-6);
      EXPECT_NEAR(r->mean(), std::log(static_cast<double>(v)), 1e-6);
    }
  }
}

TEST(CrossEntropyTest, HandValuesRowLossAndLse) {
  // Row 0: logits (1, 2, 3), target 0: loss = log(e + e^2 + e^3) - 1. Row 1 ignored.
  // Row 2: logits (0, 0, log 2), target 2: softmax = (1/4, 1/4, 1/2), loss = log 2.
  Tensor logits = Tensor::from_vector<double>({3, 3}, {1, 2, 3, 5, 5, 5, 0, 0, std::log(2.0)});
  Tensor targets = Tensor::from_vector<int32_t>({3}, {0, -1, 2});
  Tensor lse = Tensor::empty({3}, DType::kF64), rows = Tensor::empty({3}, DType::kF64);
  fill_uniform(lse, 1);
  fill_uniform(rows, 2);
  StatusOr<CrossEntropyResult> r = ce_forward(logits, targets, lse, rows);
  ASSERT_TRUE(r.ok());
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_EQ(r->count, 2);
  EXPECT_NEAR(r->loss_sum, lse0 - 1 + std::log(2.0), 1e-14);
  EXPECT_NEAR(rows.data<double>()[0], lse0 - 1, 1e-14);
  EXPECT_EQ(rows.data<double>()[1], 0.0);
  EXPECT_NEAR(rows.data<double>()[2], std::log(2.0), 1e-15);
  EXPECT_NEAR(lse.data<double>()[0], lse0, 1e-14);
  EXPECT_EQ(lse.data<double>()[1], 0.0);
  EXPECT_NEAR(lse.data<double>()[2], std::log(4.0), 1e-15);
  // Backward for the mean: scale = 1 / count; ignored rows get zeros.
  Tensor d = Tensor::empty({3, 3}, DType::kF64);
  fill_uniform(d, 3);
  ASSERT_TRUE(cross_entropy_backward(ctx(), logits, targets, lse, 0.5, d).ok());
  const double z = std::exp(lse0);
  const std::vector<double> want = {0.5 * (std::exp(1.0) / z - 1),
                                    0.5 * std::exp(2.0) / z,
                                    0.5 * std::exp(3.0) / z,
                                    0,
                                    0,
                                    0,
                                    0.5 * 0.25,
                                    0.5 * 0.25,
                                    0.5 * (0.5 - 1)};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(d.data<double>()[i], want[i], 1e-15) << i;
}

TEST(CrossEntropyTest, HugeLogitsStayFinite) {
  for (DType dt : {DType::kF64, DType::kF32}) {
    Tensor logits = Tensor::zeros({2, 3}, dt);
    const std::vector<double> values = {1e4, 1e4, 1e4, 3e4, 0, -3e4};
    for (int i = 0; i < 6; ++i) {
      if (dt == DType::kF64)
        logits.data<double>()[i] = values[i];
      else
        logits.data<float>()[i] = static_cast<float>(values[i]);
    }
    Tensor targets = Tensor::from_vector<int32_t>({2}, {1, 0});
    Tensor lse = Tensor::empty({2}, dt);
    StatusOr<CrossEntropyResult> r = ce_forward(logits, targets, lse);
    ASSERT_TRUE(r.ok());
    EXPECT_NEAR(r->loss_sum, std::log(3.0), 1e-6);  // row 0: log 3; row 1: certain, 0
    Tensor d = Tensor::empty({2, 3}, dt);
    ASSERT_TRUE(cross_entropy_backward(ctx(), logits, targets, lse, 1.0, d).ok());
    for (int64_t i = 0; i < d.numel(); ++i) {
      const double di = dt == DType::kF64 ? d.data<double>()[i] : double{d.data<float>()[i]};
      EXPECT_TRUE(std::isfinite(di)) << i;
    }
    // Row 0 is uniform: d = (1/3, 1/3 - 1, 1/3).
    const double d1 = dt == DType::kF64 ? d.data<double>()[1] : double{d.data<float>()[1]};
    // The saved lse is rounded to the working dtype: f32's spacing at 1e4 is ~1e-3, which bounds
    // the relative error of exp(logit - lse) for such logits.
    EXPECT_NEAR(d1, 1.0 / 3 - 1, dt == DType::kF64 ? 1e-12 : 1e-3);
  }
}

TEST(CrossEntropyTest, AllIgnoredCountsNothing) {
  Tensor logits = Tensor::zeros({2, 4}, DType::kF32);
  Tensor targets = Tensor::from_vector<int32_t>({2}, {-1, -1});
  StatusOr<CrossEntropyResult> r = ce_forward(logits, targets);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->count, 0);
  EXPECT_EQ(r->loss_sum, 0.0);
  EXPECT_EQ(r->mean(), 0.0);
}

TEST(CrossEntropyTest, BackwardMatchesFiniteDifferences) {
  struct Case {
    int64_t n, v;
  };
  for (const Case c : {Case{1, 1}, Case{1, 3}, Case{4, 3}, Case{5, 11}}) {
    SCOPED_TRACE(str_cat("N ", c.n, " V ", c.v));
    Tensor logits = Tensor::empty({c.n, c.v}, DType::kF64);
    fill_uniform(logits, 5, -3, 3);
    Tensor targets = Tensor::empty({c.n}, DType::kI32);
    for (int64_t i = 0; i < c.n; ++i) {
      targets.data<int32_t>()[i] = i % 3 == 1 ? -1 : static_cast<int32_t>((5 * i + 1) % c.v);
    }
    const double scale = 0.7;
    auto loss = [&]() { return scale * ce_forward(logits, targets)->loss_sum; };
    Tensor lse = Tensor::empty({c.n}, DType::kF64);
    ASSERT_TRUE(ce_forward(logits, targets, lse).ok());
    Tensor d = Tensor::empty({c.n, c.v}, DType::kF64);
    ASSERT_TRUE(cross_entropy_backward(ctx(), logits, targets, lse, scale, d).ok());
    for (const auto& f : check_gradients(loss, {{"logits", logits, d}}, {1e-6, 1e-8, 1e-6})) {
      ADD_FAILURE() << f;
    }
    // d_logits may alias logits.
    Tensor in_place = Tensor::copy_of(logits);
    ASSERT_TRUE(cross_entropy_backward(ctx(), in_place, targets, lse, scale, in_place).ok());
    EXPECT_TRUE(moe::testing::bitwise_equal(in_place, d));
  }
}

// The f32 gradient in place over its logits (the model's chunked loss computes it so) is the
// out-of-place gradient bit for bit, at widths where the row loop is vectorised and where it is
// not.
TEST(CrossEntropyTest, F32GradientInPlaceIsTheSameBits) {
  for (const int64_t v : {7, 64, 1003}) {
    SCOPED_TRACE(str_cat("V ", v));
    Tensor logits = Tensor::empty({6, v}, DType::kF32);
    fill_uniform(logits, 11, -8, 8);
    Tensor targets = Tensor::from_vector<int32_t>({6}, {0, -1, 3, 6, 2, 5});
    Tensor lse = Tensor::empty({6}, DType::kF32);
    ASSERT_TRUE(ce_forward(logits, targets, lse).ok());
    Tensor d = Tensor::empty({6, v}, DType::kF32);
    ASSERT_TRUE(cross_entropy_backward(ctx(), logits, targets, lse, 0.25, d).ok());
    Tensor in_place = Tensor::copy_of(logits);
    ASSERT_TRUE(cross_entropy_backward(ctx(), in_place, targets, lse, 0.25, in_place).ok());
    EXPECT_TRUE(moe::testing::bitwise_equal(in_place, d));
  }
}

// bf16 head activations: the loss stays f32 and the gradient is the f32 one rounded to bf16.
TEST(CrossEntropyTest, Bf16GradientFromF32Logits) {
  Tensor logits = Tensor::empty({3, 5}, DType::kF32);
  fill_uniform(logits, 9, -4, 4);
  Tensor targets = Tensor::from_vector<int32_t>({3}, {4, -1, 0});
  Tensor lse = Tensor::empty({3}, DType::kF32);
  ASSERT_TRUE(ce_forward(logits, targets, lse).ok());
  Tensor d32 = Tensor::empty({3, 5}, DType::kF32), d16 = Tensor::empty({3, 5}, DType::kBF16);
  ASSERT_TRUE(cross_entropy_backward(ctx(), logits, targets, lse, 0.5, d32).ok());
  ASSERT_TRUE(cross_entropy_backward(ctx(), logits, targets, lse, 0.5, d16).ok());
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(static_cast<float>(d16.data<bf16>()[i]),
              static_cast<float>(bf16(d32.data<float>()[i])))
        << i;
  }
  expect_invalid(
      cross_entropy_backward(ctx(), logits, targets, lse, 1.0, Tensor::zeros({3, 5}, DType::kF64)),
      "d_logits");
}

TEST(CrossEntropyTest, BadArgumentsAreInvalidArgument) {
  Tensor logits = Tensor::zeros({3, 4}, DType::kF32);
  Tensor targets = Tensor::from_vector<int32_t>({3}, {0, -1, 3});
  Tensor lse = Tensor::zeros({3}, DType::kF32);
  Tensor d = Tensor::zeros({3, 4}, DType::kF32);
  ASSERT_TRUE(ce_forward(logits, targets, lse).ok());
  expect_invalid(ce_forward(logits, Tensor::from_vector<int32_t>({3}, {0, 4, 1})).status(),
                 "target 4 at row 1");
  expect_invalid(ce_forward(logits, Tensor::from_vector<int32_t>({3}, {0, 1, -2})).status(),
                 "target -2 at row 2");
  expect_invalid(ce_forward(logits, Tensor::from_vector<int64_t>({3}, {0, 1, 2})).status(),
                 "targets");
  expect_invalid(ce_forward(logits, Tensor::from_vector<int32_t>({2}, {0, 1})).status(), "targets");
  expect_invalid(ce_forward(logits.view().reshape({12}), targets).status(), "logits");
  expect_invalid(ce_forward(Tensor::zeros({3, 4}, DType::kI32), targets).status(), "logits");
  expect_invalid(ce_forward(logits, targets, Tensor::zeros({4}, DType::kF32)).status(), "lse");
  expect_invalid(ce_forward(logits, targets, lse, Tensor::zeros({3}, DType::kF64)).status(),
                 "row_loss");
  expect_invalid(
      cross_entropy_forward(ctx(), logits, targets, lse, Tensor::zeros({2}, DType::kF32)), "sums");
  expect_invalid(
      cross_entropy_backward(ctx(), logits, targets, Tensor::zeros({3}, DType::kF64), 1.0, d),
      "lse");
  expect_invalid(
      cross_entropy_backward(ctx(), logits, targets, lse, 1.0, Tensor::zeros({3, 5}, DType::kF32)),
      "d_logits");
}

}  // namespace
}  // namespace moe::kernels
